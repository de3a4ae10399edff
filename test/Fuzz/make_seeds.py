#!/usr/bin/env python3
"""Seed corpora of the fuzz targets, from the test inputs (scripts/sanitize.sh):

    make_seeds.py FUZZ_DIR     # writes FUZZ_DIR/seeds-{mlir,safetensors,tokens,npy}

.mlir: every test file, split where it holds several cases. Checkpoints:
the three tensors the fuzz target loads (w F32 [3, 4], h BF16 [5], s F32 []),
as the runtime writes them (metadata and CRC-32C) and bare. Token files:
a vocabulary (two bytes) and tokens, some outside it. .npy inputs: a byte
choosing the input (0: float [N, 4], 1: labels [N] below 10), then NumPy's
format 1 and 2 files of several dtypes, some with a wrong shape or a label
out of range."""
import glob
import json
import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "runtime", "tests"))
from read_safetensors import crc32c  # noqa: E402

fuzz = sys.argv[1]
root = os.path.join(os.path.dirname(__file__), "..", "..")
n = 0
for path in sorted(glob.glob(os.path.join(root, "test", "**", "*.mlir"), recursive=True)) + \
        sorted(glob.glob(os.path.join(root, "test", "Fuzz", "regressions", "mlir", "*"))):
    for chunk in open(path, errors="replace").read().split("// -----"):
        open(os.path.join(fuzz, "seeds-mlir", f"{n}.mlir"), "w").write(chunk)
        n += 1
tensors = [("w", "F32", [3, 4], struct.pack("<12f", *[0.5 * i for i in range(12)])),
           ("h", "BF16", [5], struct.pack("<5H", *[0x3f80] * 5)),
           ("s", "F32", [], struct.pack("<f", 7.0))]
for k, meta in enumerate([{}, {"step": "42", "format": "loom checkpoint part 1"}]):
    header, off, blob = {}, 0, b""
    if meta:
        header["__metadata__"] = dict(meta, **{"crc32c:" + t[0]: "%08x" % crc32c(t[3]) for t in tensors})
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(fuzz, "seeds-safetensors", f"{k}.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)
rnd = random.Random(1)
for k, (vocab, count) in enumerate([(64, 40), (0, 20), (300, 100), (2, 3)]):
    toks = [rnd.randrange(max(vocab, 1) + 2) for _ in range(count)]
    with open(os.path.join(fuzz, "seeds-tokens", f"{k}.bin"), "wb") as f:
        f.write(struct.pack("<H", vocab) + struct.pack(f"<{count}H", *toks))


def npy(descr, shape, payload, major=1):
    """A .npy file as numpy.save writes it (header padded to 64 bytes)."""
    dims = "".join(f"{d}, " for d in shape) if len(shape) == 1 else ", ".join(map(str, shape))
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}"
    lead = 10 if major == 1 else 12
    header += " " * ((64 - (lead + len(header) + 1) % 64) % 64) + "\n"
    size = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + size + header.encode() + payload


seeds = [
    (0, npy("<f4", [3, 4], struct.pack("<12f", *range(12)))),
    (0, npy("<f8", [2, 4], struct.pack("<8d", *range(8)), major=2)),
    (0, npy("<f4", [3, 5], struct.pack("<15f", *range(15)))),
    (1, npy("<i8", [5], struct.pack("<5q", 0, 3, 9, 1, 2))),
    (1, npy("<i4", [4], struct.pack("<4i", 1, -1, 12, 3))),
    (1, npy("|u1", [6], bytes([0, 1, 2, 3, 4, 5]))),
]
os.makedirs(os.path.join(fuzz, "seeds-npy"), exist_ok=True)
for k, (which, body) in enumerate(seeds):
    with open(os.path.join(fuzz, "seeds-npy", f"{k}.bin"), "wb") as f:
        f.write(bytes([which]) + body)
