"""Feed the reference's GeckoCollector (CPython 3.15 `profiling.sampling`)
the synthetic samples of fixtures/reference/gecko-scenarios.json (stacks,
thread statuses and timestamps) and save the Firefox Profiler profiles it
writes, so tachyon's gecko collector can be compared with them.

It needs python3.15 with the reference; from the repository root:
    root=/var/cache/tachyon/sid; work=$(mktemp -d $root/tmp/gecko.XXXXXX)
    cp scripts/reference-gecko.py fixtures/reference/gecko-scenarios.json $work/
    chroot $root /usr/bin/python3.15 -s /tmp/${work##*/}/reference-gecko.py \
        /tmp/${work##*/}/gecko-scenarios.json /tmp/${work##*/}
    cp $work/gecko-*.json $work/gecko-*.stdout fixtures/reference/
    # keep gecko-scenarios.json as it is; then rm -rf $work

Samples are given with their timestamps (the collector's replay path), so
times are milliseconds from the first sample, as in tachyon. The fields that
depend on the machine, the clock or the profiler's pid are replaced by fixed
values (NORMALIZED_META, NORMALIZED_PID), so the fixtures are reproducible;
the JSON is otherwise written as the collector writes it (compact, members
in order), so it can be compared byte for byte. For every scenario it writes:
  gecko-<name>.json     the profile GeckoCollector.export() wrote, normalized
  gecko-<name>.stdout   what export() printed, the path replaced by FILE
"""

import collections
import contextlib
import io
import json
import os
import sys

from profiling.sampling.gecko_collector import GeckoCollector

# The shapes _remote_debugging hands the collectors (struct sequences there;
# named tuples are indexable and have the same attribute names).
FrameInfo = collections.namedtuple("FrameInfo", "filename location funcname opcode")
ThreadInfo = collections.namedtuple("ThreadInfo", "thread_id status frame_info")
InterpreterInfo = collections.namedtuple("InterpreterInfo", "interpreter_id threads")

NORMALIZED_META = {
    "startTime": 0.0,
    "abi": "MACHINE",
    "oscpu": "MACHINE",
    "platform": "SYSTEM",
    "physicalCPUs": 0,
    "logicalCPUs": 0,
}
NORMALIZED_PID = "PID"


def frame(entry):
    file, line, func = entry[:3]
    col = entry[3] if len(entry) > 3 else 0
    if file == "~" and line == 0:
        # Synthetic frames (<GC>, <native>) carry no location.
        return FrameInfo(file, None, func, None)
    if col < 0:
        return FrameInfo(file, (line, line, -1, -1), func, None)
    return FrameInfo(file, (line, line, col, col + 1), func, None)


def main():
    scenarios = json.load(open(sys.argv[1], encoding="utf-8"))["scenarios"]
    out = sys.argv[2]
    for sc in scenarios:
        name = sc["name"]
        stacks = {k: [frame(e) for e in v] for k, v in sc["stacks"].items()}
        collector = GeckoCollector(sc["interval_us"], skip_idle=False)
        for s in sc["samples"]:
            threads = [
                ThreadInfo(tid, status, stacks[stack])
                for tid, status, stack in s["threads"]
            ]
            collector.collect([InterpreterInfo(0, threads)], timestamps_us=[s["t"]])
        path = os.path.join(out, f"gecko-{name}.raw.json")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            collector.export(path)
        with open(path, encoding="utf-8") as f:
            profile = json.load(f)
        os.unlink(path)
        profile["meta"].update(NORMALIZED_META)
        for thread in profile["threads"]:
            thread["pid"] = NORMALIZED_PID
        # Written as the collector writes: compact, ASCII, members in order.
        with open(os.path.join(out, f"gecko-{name}.json"), "w", encoding="utf-8") as f:
            json.dump(profile, f, separators=(",", ":"), allow_nan=False)
        with open(os.path.join(out, f"gecko-{name}.stdout"), "w", encoding="utf-8") as f:
            f.write(buf.getvalue().replace(path, "FILE"))


if __name__ == "__main__":
    main()
