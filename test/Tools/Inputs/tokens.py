#!/usr/bin/env python3
"""Writes N random uint16 tokens below V to a file: tokens.py OUT N V."""
import random
import struct
import sys

out, n, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(n)
with open(out, "wb") as f:
    f.write(struct.pack(f"<{n}H", *(random.randrange(v) for _ in range(n))))
