#!/usr/bin/env python3
"""Checks a checkpoint written by checkpoint_test.cpp with a reader that is
not loomrt's: safetensors.torch.load_file where the safetensors package is
installed (the GPU machines), else a reader of the published format (8-byte
little-endian header length, JSON header, raw little-endian data).

Expected content: "w" F32 [3, 4] = 0.5 * i, "h" BF16 [5] = bf16(i - 2),
"s" F32 [] = 7, metadata {"step": "42"} plus each tensor's CRC-32C under
"crc32c:NAME", checked here with an implementation of the published
polynomial (not loomrt's)."""
import json
import struct
import sys


def expected():
    return {"w": ([3, 4], [0.5 * i for i in range(12)]),
            "h": ([5], [float(i - 2) for i in range(5)]),
            "s": ([], [7.0])}


def by_safetensors(path):
    from safetensors import safe_open
    from safetensors.torch import load_file
    tensors = load_file(path)
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    got = {k: (list(v.shape), [float(x) for x in v.float().flatten().tolist()])
           for k, v in tensors.items()}
    return got, meta, "safetensors"


def by_format(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    got = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        raw = data[base + b:base + end]
        if e["dtype"] == "F32":
            vals = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        elif e["dtype"] == "BF16":
            vals = [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                    for h in struct.unpack(f"<{len(raw) // 2}H", raw)]
        else:
            sys.exit(f"unexpected dtype {e['dtype']}")
        got[name] = (e["shape"], vals)
    return got, meta, "the format reader"


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def check_crcs(path, meta):
    """The checksums in `meta` against the tensors' raw bytes; returns the
    metadata without them."""
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    for name, e in header.items():
        b, end = e["data_offsets"]
        want = meta.get("crc32c:" + name)
        got = "%08x" % crc32c(data[8 + n + b:8 + n + end])
        if want != got:
            sys.exit(f"checksum of {name}: stored {want}, computed {got}")
    return {k: v for k, v in meta.items() if not k.startswith("crc32c:")}


def main():
    path = sys.argv[1]
    try:
        got, meta, how = by_safetensors(path)
    except ImportError:
        got, meta, how = by_format(path)
    if got != expected():
        sys.exit(f"content differs ({how}): {got}")
    meta = check_crcs(path, meta)
    if meta != {"step": "42"}:
        sys.exit(f"metadata differs ({how}): {meta}")
    print(f"checkpoint read back with {how}")


if __name__ == "__main__":
    main()
