"""Feed the reference's collectors (CPython 3.15 `profiling.sampling`) the
synthetic stacks of fixtures/reference/scenarios.json and save what they
print and write, so tachyon's collectors can be compared byte for byte.

Run it through scripts/gen-reference-fixtures.sh (it needs python3.15):
    python3.15 reference-collectors.py SCENARIOS_JSON OUT_DIR

For every scenario it writes:
  <name>.collapsed.txt   CollapsedStackCollector.export()
  <name>.prof            PstatsCollector.export() (marshal, with the marker)
  <out> for every entry of "pstats": PstatsCollector.print_stats() stdout
"""

import collections
import contextlib
import io
import json
import os
import sys

from profiling.sampling import constants
from profiling.sampling.pstats_collector import PstatsCollector
from profiling.sampling.stack_collector import CollapsedStackCollector

# The shapes _remote_debugging hands the collectors (struct sequences there;
# named tuples are indexable and have the same attribute names).
FrameInfo = collections.namedtuple("FrameInfo", "filename location funcname opcode")
ThreadInfo = collections.namedtuple("ThreadInfo", "thread_id status frame_info")
InterpreterInfo = collections.namedtuple("InterpreterInfo", "interpreter_id threads")

SORTS = {
    "nsamples": constants.SORT_MODE_NSAMPLES,
    "tottime": constants.SORT_MODE_TOTTIME,
    "cumtime": constants.SORT_MODE_CUMTIME,
    "sample-pct": constants.SORT_MODE_SAMPLE_PCT,
    "cumul-pct": constants.SORT_MODE_CUMUL_PCT,
    "nsamples-cumul": constants.SORT_MODE_NSAMPLES_CUMUL,
    "name": -1,
}
MODES = {"wall": constants.PROFILING_MODE_WALL, "cpu": constants.PROFILING_MODE_CPU}


def frame(entry):
    file, line, func = entry[:3]
    col = entry[3] if len(entry) > 3 else 0
    if file == "~" and line == 0:
        # Synthetic frames (<GC>, <native>) carry no location.
        return FrameInfo(file, None, func, None)
    return FrameInfo(file, (line, line, col, col + 1), func, None)


def samples(sc):
    stacks = {k: [frame(e) for e in v] for k, v in sc["stacks"].items()}
    for s in sc["samples"]:
        threads = [ThreadInfo(tid, 0, stacks[name]) for tid, name in s["threads"]]
        for _ in range(s["repeat"]):
            yield [InterpreterInfo(0, threads)]


def main():
    scenarios = json.load(open(sys.argv[1], encoding="utf-8"))["scenarios"]
    out = sys.argv[2]
    for sc in scenarios:
        name = sc["name"]
        collapsed = CollapsedStackCollector(sc["interval_us"])
        for s in samples(sc):
            collapsed.collect(s)
        with contextlib.redirect_stdout(io.StringIO()):
            collapsed.export(os.path.join(out, f"{name}.collapsed.txt"))

        for run in sc["pstats"]:
            pst = PstatsCollector(sc["interval_us"])
            for s in samples(sc):
                pst.collect(s)
            # get_colors() decides at print time; PYTHON_COLORS wins over
            # everything else in _colorize.can_colorize().
            os.environ["PYTHON_COLORS"] = "1" if run.get("color") else "0"
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                pst.print_stats(
                    SORTS[run.get("sort", "nsamples")],
                    run.get("limit", 15),
                    run.get("summary", True),
                    MODES[run.get("mode", "wall")],
                )
            with open(os.path.join(out, run["out"]), "w", encoding="utf-8") as f:
                f.write(buf.getvalue())

        pst = PstatsCollector(sc["interval_us"])
        for s in samples(sc):
            pst.collect(s)
        pst.export(os.path.join(out, f"{name}.prof"))


if __name__ == "__main__":
    main()
