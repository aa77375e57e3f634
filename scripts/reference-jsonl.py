"""Feed the reference's JsonlCollector (CPython 3.15 `profiling.sampling`)
the synthetic stacks of one or more scenario files and save what it writes,
so tachyon's `--jsonl` output can be compared record by record.

Run it through scripts/gen-reference-jsonl.sh (it needs python3.15):
    python3.15 reference-jsonl.py OUT_DIR SCENARIOS_JSON...

The scenario files have the schema of fixtures/reference/scenarios.json
(fixtures/reference/jsonl/scenarios.json adds edge cases). A stack entry is
[file, line, func], [file, line, func, col] (location (line, line, col,
col + 1)) or [file, line, func, col, end_line, end_col] (that location as
given); file "~" with line 0 is a synthetic frame without a location. A
scenario's optional "jsonl_mode" names the mode (default "wall").

For every scenario it writes <name>.jsonl, JsonlCollector.export() with a
random run_id (tachyon's tests ignore it).
"""

import collections
import contextlib
import io
import json
import os
import sys

from profiling.sampling import constants
from profiling.sampling.jsonl_collector import JsonlCollector

# The shapes _remote_debugging hands the collectors (struct sequences there;
# named tuples are indexable and have the same attribute names).
FrameInfo = collections.namedtuple("FrameInfo", "filename location funcname opcode")
ThreadInfo = collections.namedtuple("ThreadInfo", "thread_id status frame_info")
InterpreterInfo = collections.namedtuple("InterpreterInfo", "interpreter_id threads")

MODES = {name: code for code, name in constants.PROFILING_MODE_NAMES.items()}


def frame(entry):
    file, line, func = entry[:3]
    if file == "~" and line == 0:
        # Synthetic frames (<GC>, <native>) carry no location.
        return FrameInfo(file, None, func, None)
    if len(entry) >= 6:
        col, end_line, end_col = entry[3:6]
        return FrameInfo(file, (line, end_line, col, end_col), func, None)
    col = entry[3] if len(entry) > 3 else 0
    return FrameInfo(file, (line, line, col, col + 1), func, None)


def samples(sc):
    stacks = {k: [frame(e) for e in v] for k, v in sc["stacks"].items()}
    for s in sc["samples"]:
        threads = [ThreadInfo(tid, 0, stacks[name]) for tid, name in s["threads"]]
        for _ in range(s["repeat"]):
            yield [InterpreterInfo(0, threads)]


def main():
    out = sys.argv[1]
    for path in sys.argv[2:]:
        for sc in json.load(open(path, encoding="utf-8"))["scenarios"]:
            mode = MODES[sc.get("jsonl_mode", "wall")]
            c = JsonlCollector(sc["interval_us"], mode=mode)
            for s in samples(sc):
                c.collect(s)
            with contextlib.redirect_stdout(io.StringIO()):
                c.export(os.path.join(out, f"{sc['name']}.jsonl"))


if __name__ == "__main__":
    main()
