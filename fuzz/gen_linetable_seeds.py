"""Write real location tables as seeds for the `linetable` fuzz target.

Run with each interpreter under test (3.13, 3.14, 3.15):

    chroot /var/cache/tachyon/sid python3.X - OUTDIR < fuzz/gen_linetable_seeds.py

Each seed is: firstlineno (i32 LE), a code-unit address to look up (u32 LE),
then the bytes of `co_linetable`. Code objects come from compiling a few
stdlib modules chosen for varied constructs; tables are deduplicated by
content and capped in number and size so the corpus stays small.
"""

import hashlib
import os
import random
import struct
import sys
import sysconfig

MODULES = [
    "argparse.py", "dataclasses.py", "json/decoder.py", "typing.py",
    "asyncio/base_events.py", "re/_parser.py", "string/__init__.py",
    "textwrap.py", "contextlib.py", "functools.py", "enum.py",
    "pathlib/_local.py", "pathlib.py", "statistics.py",
]
PER_VERSION = 60
MAX_TABLE = 4096

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
lib = sysconfig.get_paths()["stdlib"]
tag = "%d%d" % sys.version_info[:2]
rng = random.Random(int(tag))


def walk(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_linetable"):
            yield from walk(c)


codes = []
for m in MODULES:
    p = os.path.join(lib, m)
    if not os.path.exists(p):
        continue
    with open(p, encoding="utf-8") as f:
        src = f.read()
    codes.extend(walk(compile(src, p, "exec")))

seen = set()
picked = []
for co in codes:
    t = co.co_linetable
    if not t or len(t) > MAX_TABLE:
        continue
    h = hashlib.sha1(t).hexdigest()
    if h in seen:
        continue
    seen.add(h)
    picked.append(co)

rng.shuffle(picked)
# Keep the biggest few (long forms, big line deltas) and a random rest.
picked.sort(key=lambda c: -len(c.co_linetable))
chosen = picked[:10] + rng.sample(picked[10:], min(PER_VERSION - 10, len(picked) - 10))
for co in chosen:
    t = co.co_linetable
    units = max(1, len(co.co_code) // 2)
    addr = rng.randrange(units)
    h = hashlib.sha1(t).hexdigest()[:12]
    with open(os.path.join(out, "py%s-%s" % (tag, h)), "wb") as f:
        f.write(struct.pack("<iI", co.co_firstlineno, addr) + t)
print(tag, len(chosen), "of", len(picked))
