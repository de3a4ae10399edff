#!/usr/bin/env python3
"""Byte-level tokens for the bundled example: every byte of a text file is a
token (vocabulary 256), written as raw little-endian uint16, the format of
nanoGPT's train.bin that the training binaries and loom-run --data read.

    python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 build/gpl3.bin
"""
import struct
import sys

if len(sys.argv) != 3:
    sys.exit("usage: make_tokens.py TEXT_FILE OUT.bin")
try:
    data = open(sys.argv[1], "rb").read()
except OSError as e:
    sys.exit(f"make_tokens.py: cannot read {sys.argv[1]}: {e.strerror}")
if not data:
    sys.exit(f"make_tokens.py: {sys.argv[1]} is empty")
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(f"<{len(data)}H", *data))
print(f"{len(data)} tokens from {sys.argv[1]} -> {sys.argv[2]}")
