"""Write real str, bytes and C-string memory images as seeds for the
`strings` fuzz target.

Run with each interpreter under test, release and debug:

    chroot /var/cache/tachyon/sid python3.Xd - OUTDIR < fuzz/gen_string_seeds.py

Each seed is: which offsets table to use (u8, an index into the target's
list of fixtures/offsets tables), which reader (u8: 0 read_str, 1
read_bytes, 2 read_cstr), where the object starts in the memory image
(u16 LE), then the memory image: the object's bytes as the interpreter
holds them (ctypes.string_at over sys.getsizeof), with a little of the
next object's memory after it.
"""

import ctypes
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
debug = hasattr(sys, "gettotalrefcount")
# The order of TABLES in fuzz/fuzz_targets/strings.rs.
table = {(13, False): 1, (13, True): 2, (14, False): 3, (14, True): 4,
         (15, False): 5, (15, True): 6}[(sys.version_info[1], debug)]
tag = "py%d%d%s" % (sys.version_info[0], sys.version_info[1], "d" if debug else "")

strs = {
    "ascii": "build_frame_table",
    "empty": "",
    "latin1": "caf\xe9 cr\xe8me",
    "ucs2": "\u0444\u0443\u043d\u043a\u0446\u0438\u044f",
    "ucs4": "f\U0001f600n",
    "long": "x" * 300,
    "qualname": "Outer.<locals>.inner",
}
byts = {
    "linetable": (lambda: None).__code__.co_linetable,
    "empty": b"",
    "binary": bytes(range(256)),
}


def image(o, extra=16):
    n = sys.getsizeof(o)
    return ctypes.string_at(id(o), n + extra)


def put(name, op, mem):
    with open(os.path.join(out, "%s-%s" % (tag, name)), "wb") as f:
        f.write(struct.pack("<BBH", table, op, 0) + mem)


for k, s in strs.items():
    # Compact strings are created fresh so the image is the object itself.
    s = "".join(list(s))
    put("str-" + k, 0, image(s))
for k, b in byts.items():
    put("bytes-" + k, 1, image(b))
put("cstr-typename", 2, ctypes.string_at(ctypes.c_char_p(b"builtin_function_or_method"), 27))
print(tag, len(strs) + len(byts) + 1)
