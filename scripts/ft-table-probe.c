/* The _Py_DebugOffsets table a free-threaded build of this Python would
 * carry, made from the installed headers alone: the table's initializer
 * compiled with Py_GIL_DISABLED defined, its bytes written to stdout.
 * Compiled without Py_GIL_DISABLED against 3.14 it gives the live GIL
 * table byte for byte (3.15: all but the runtime's and the interpreter's
 * struct sizes), which is what makes it a fact source for 3.14t and
 * 3.15t, whose interpreters cannot be built here. */
#define Py_BUILD_CORE 1
#ifndef PROBE_GIL
#define Py_GIL_DISABLED 1
#endif
#include "Python.h"
#include "internal/pycore_runtime.h"
#include "internal/pycore_debug_offsets.h"
#include <stdio.h>

static _Py_DebugOffsets table = _Py_DebugOffsets_INIT(_Py_Debug_Cookie);

int main(void)
{
    return fwrite(&table, sizeof table, 1, stdout) == 1 ? 0 : 1;
}
