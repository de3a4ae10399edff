#!/usr/bin/env python3
"""A real text for the convergence benchmarks (issue 53): the Python
standard library's sources that Debian ships (/usr/lib/python3.*, package
python3.11-minimal and libpython3.11-stdlib), every .py file in sorted path
order, concatenated and written as byte tokens (vocabulary 256, raw
little-endian uint16: the format examples/make_tokens.py writes and the
training binaries read with --data). About 11.3M tokens on Debian 12: 500
steps of 16 x 1024 tokens read 8.2M, so a run sampling at random
(--sample random) sees most of it about once, unlike the GPL-3's 35 KB,
which a 1B model memorises within 150 steps.

    python3 bench/make_corpus.py OUT.bin [--max-bytes N]
"""
import argparse
import glob
import os
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--max-bytes", type=int, default=0, help="stop after N bytes (0: all)")
    a = p.parse_args()
    roots = sorted(glob.glob("/usr/lib/python3.[0-9]*"))
    if not roots:
        sys.exit("make_corpus.py: no /usr/lib/python3.* here (Debian's python3-minimal)")
    files = sorted(f for f in glob.glob(os.path.join(roots[0], "**", "*.py"), recursive=True)
                   if os.path.isfile(f))
    data = bytearray()
    used = 0
    for f in files:
        used += 1
        with open(f, "rb") as fh:
            data += fh.read()
        if a.max_bytes and len(data) >= a.max_bytes:
            del data[a.max_bytes:]
            break
    if not data:
        sys.exit(f"make_corpus.py: no .py files under {roots[0]}")
    out = bytearray(2 * len(data))
    out[0::2] = data  # little-endian uint16: the byte, then 0
    with open(a.out, "wb") as fh:
        fh.write(out)
    print(f"{len(data)} byte tokens from {used} files under {roots[0]} -> {a.out}")


if __name__ == "__main__":
    main()
