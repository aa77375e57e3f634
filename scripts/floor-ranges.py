#!/usr/bin/env python3
"""The remote ranges of one steady tachyon sample, for scripts/floor.c.

Reads `strace -f -tt -v -e trace=process_vm_readv` output of a tachyon run
at a rate low enough that its samples stand apart in time, groups the
calls into samples (calls less than GAP_US apart belong to one sample:
half the interval of the 200 Hz that compare.sh traces at), and prints
the calls of the steady sample as "CALL ADDR LEN" lines: the reads a
steady sample makes, as tachyon makes them. The first sample (which
reads everything once) is left out; the steady sample has the most
common shape (ranges per call), and of those the most common ranges, or
when none repeats (threads that come and go), the last one, whose
threads most likely still run.

Usage: floor-ranges.py STRACE_OUTPUT > RANGES
"""
import collections
import re
import sys

GAP_US = 2500
CALL = re.compile(r"^\d+\s+(\d+):(\d+):(\d+)\.(\d+) process_vm_readv\((.*)$")
REMOTE = re.compile(r"\{iov_base=(0x[0-9a-f]+), iov_len=(\d+)\}")


def calls(path):
    for line in open(path, errors="replace"):
        m = CALL.match(line)
        if not m:
            continue
        h, mi, s, us = (int(x) for x in m.groups()[:4])
        ranges = tuple((a, int(n)) for a, n in REMOTE.findall(m.group(5)))
        if ranges:
            yield ((h * 60 + mi) * 60 + s) * 1_000_000 + us, ranges


def samples(path):
    group, last = [], None
    for t, ranges in calls(path):
        if last is not None and t - last > GAP_US and group:
            yield tuple(group)
            group = []
        group.append(ranges)
        last = t
    if group:
        yield tuple(group)


def shape(sample):
    return tuple(len(call) for call in sample)


def steady_sample(all_samples):
    rest = all_samples[1:] or all_samples
    common = collections.Counter(shape(s) for s in rest).most_common(1)[0][0]
    alike = [s for s in rest if shape(s) == common]
    counts = collections.Counter(alike)
    most = max(counts.values())
    # The last of the most repeated (the last of all when none repeats).
    return [s for s in alike if counts[s] == most][-1]


def main():
    all_samples = list(samples(sys.argv[1]))
    if not all_samples:
        sys.exit("floor-ranges: no process_vm_readv calls in " + sys.argv[1])
    steady = steady_sample(all_samples)
    for i, ranges in enumerate(steady):
        for addr, n in ranges:
            print(i, addr, n)


main()
