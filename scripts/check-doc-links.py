#!/usr/bin/env python3
"""Check relative Markdown links: every target file exists, every #anchor
exists (GitHub's heading slugs)."""
import os, re, sys
root = sys.argv[1]
files = [os.path.join(root, "README.md")] + [os.path.join(root, "docs", f) for f in sorted(os.listdir(os.path.join(root, "docs"))) if f.endswith(".md")]
def slugs(path):
    out, seen = set(), {}
    in_code = False
    for line in open(path):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code: continue
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m: continue
        t = m.group(1).strip().lower()
        t = re.sub(r"[^\w\- ]", "", t)   # drop punctuation (backticks, dots, slashes...)
        t = t.replace(" ", "-")
        n = seen.get(t, 0); seen[t] = n + 1
        out.add(t if n == 0 else f"{t}-{n}")
    return out
bad = 0; count = 0
for f in files:
    text = open(f).read()
    text_nocode = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in re.finditer(r"\]\(([^)\s]+)\)", text_nocode):
        link = m.group(1)
        if re.match(r"[a-z]+:", link): continue
        count += 1
        path, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(target):
            print(f"{f}: missing file {link}"); bad += 1; continue
        if anchor and target.endswith(".md") and anchor not in slugs(target):
            print(f"{f}: missing anchor {link}"); bad += 1
print(f"{count} relative links checked, {bad} broken")
sys.exit(1 if bad else 0)
