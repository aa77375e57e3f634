"""Print one CPython version's opcode table as a Rust static.

Run by scripts/gen-opcodes.sh under each supported interpreter: the names,
specialised forms, their base instructions and the inline-cache sizes come
from that interpreter's own `opcode`/`dis` modules, never from a list
written by hand.
"""

import dis
import opcode
import sys

names = {}
base = {}
caches = {}

if sys.version_info >= (3, 13):
    for num, name in enumerate(opcode.opname[:256]):
        if not name.startswith("<"):
            names[num] = name
    spec = opcode._specialized_opmap
    for name, num in spec.items():
        if num < 256:
            names[num] = name
    for b, family in opcode._specializations.items():
        for s in family:
            if spec.get(s, 256) < 256:
                base[spec[s]] = opcode.opmap[b]
    for name, n in opcode._inline_cache_entries.items():
        if opcode.opmap.get(name, 256) < 256:
            caches[opcode.opmap[name]] = n
else:
    for num, name in enumerate(dis._all_opname[:256]):
        if not name.startswith("<"):
            names[num] = name
    for b, family in opcode._specializations.items():
        for s in family:
            base[dis._all_opmap[s]] = opcode.opmap[b]
    for num, n in enumerate(opcode._inline_cache_entries[:256]):
        if n:
            caches[num] = n

for s, b in base.items():
    if b in caches:
        caches[s] = caches[b]
# An instrumented instruction (sys.monitoring) keeps its plain form's
# caches in the bytecode.
for num, name in names.items():
    plain = opcode.opmap.get(name[len("INSTRUMENTED_"):])
    if name.startswith("INSTRUMENTED_") and plain is not None and plain in caches:
        caches[num] = caches[plain]

major, minor = sys.version_info[:2]
print(f"/// CPython {major}.{minor}.")
print(f"pub static PY3{minor}: OpTable = OpTable {{")
print("    names: [")
for num in range(256):
    print(f'        "{names.get(num, "")}",')
print("    ],")
print("    base: [")
for num in range(256):
    print(f"        {base.get(num, num)},")
print("    ],")
print("    caches: [")
for num in range(256):
    print(f"        {caches.get(num, 0)},")
print("    ],")
print("};")
