#!/usr/bin/env python3
"""loom-ckpt: read a training binary's checkpoint without the binary.

    loom-ckpt export DIR -o model.safetensors   the model's parameters, whole,
                                                under their names, in one file
    loom-ckpt show DIR                          the committed step and what
                                                each part holds

DIR is a --checkpoint-dir: the manifest DIR/checkpoint.json names the
committed step and one part a rank (DIR/step-S.rankR-of-W.safetensors,
docs/codegen.md). Each part's metadata says what it holds ("layout"):
parameters saved whole (ZeRO 0-2: every rank holds them; rank 0's are
taken) and ZeRO shards of flattened buckets (ZeRO-3, and the master shards
of an offloaded ZeRO 1-2 run), which are put back together: rank r holds
elements [r, r+1) x padded / world of its bucket, whose members follow one
another, each starting at a multiple of the bucket's alignment. With
tensor parallelism (layout "tensor_parallel" T, "tp" {name: [dim,
groups]}), each of the T places of a group is put back together over its
data-parallel ranks, then each split parameter from its T slices. A
pipeline's checkpoint (layout "pipeline_parallel" P) is put back together
stage by stage (world / P ranks each, each part with its stage's layout);
an expert-parallel one (layout "expert_parallel" N) from each of the
first N ranks' experts and every rank's shards of the rest.
The output
is a safetensors file of the parameters alone (no optimizer state), loadable
with safetensors.torch.load_file and a PyTorch model's load_state_dict when
the parameter names and layouts are the model's (loomc's generators; for
ONNX imports, the initializers as Loom holds them: docs/onnx.md). Each
part's per-tensor CRC-32C is checked with --verify (the binary checks
them when it resumes). Parts are memory-mapped, not read whole. Python 3
standard library only."""
import argparse
import json
import mmap
import os
import struct
import sys

FORMATS = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4}


def die(msg):
    sys.exit(f"loom-ckpt: error: {msg}")


def crc32c(data):
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven."""
    table = crc32c.table
    if table is None:
        table = crc32c.table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


crc32c.table = None


def read_part(path, verify):
    """(header without metadata, metadata, data) of one safetensors part; the
    data is a read-only memory map of the file past its header."""
    try:
        f = open(path, "rb")
        raw = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:
        die(f"cannot read checkpoint part '{path}': {getattr(e, 'strerror', None) or e}")
    if len(raw) < 8:
        die(f"'{path}' is not a safetensors file (shorter than its header length)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        die(f"'{path}': the header length {n} runs past the file's {len(raw)} bytes")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        die(f"'{path}': the header is not JSON ({e})")
    if not isinstance(header, dict):
        die(f"'{path}': the header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    data = memoryview(raw)[8 + n:]
    for name, e in header.items():
        a, b = (e.get("data_offsets") or [0, -1]) if isinstance(e, dict) else (0, -1)
        if e.get("dtype") not in FORMATS or not 0 <= a <= b <= len(data):
            die(f"'{path}': tensor '{name}' has a bad dtype or offsets")
        want = meta.get(f"crc32c:{name}")
        if not verify or want is None:
            continue
        try:
            want = int(want, 16)
        except ValueError:
            die(f"'{path}': the checksum of '{name}' is not hexadecimal")
        if crc32c(data[a:b]) != want:
            die(f"'{path}': tensor '{name}' does not match its checksum (a damaged file)")
    return header, meta, data


def load(dirname, verify):
    manifest = os.path.join(dirname, "checkpoint.json")
    try:
        with open(manifest) as f:
            m = json.load(f)
    except OSError as e:
        die(f"no committed checkpoint in '{dirname}' (cannot open '{manifest}': {e.strerror})")
    except ValueError:
        die(f"'{manifest}' is not JSON")
    if not str(m.get("format", "")).startswith("loom checkpoint"):
        die(f"'{manifest}' is not a Loom checkpoint manifest")
    world, parts = m.get("world"), m.get("parts")
    if not isinstance(world, int) or not isinstance(parts, list) or len(parts) != world:
        die(f"'{manifest}' must name one part for each of its {world} ranks")
    loaded = [read_part(os.path.join(dirname, os.path.basename(str(p))), verify) for p in parts]
    for r, (_, meta, _) in enumerate(loaded):
        if meta.get("rank") != str(r) or meta.get("step") != str(m.get("step")):
            die(f"part {parts[r]} is not rank {r}'s part of step {m.get('step')}")
        if "layout" not in meta:
            die(f"part {parts[r]} has no layout (written by a binary older than loom-ckpt): "
                "resume it with its binary and save again")
    return m, loaded


def tensor_bytes(part, name):
    header, _, data = part
    e = header[name]
    a, b = e["data_offsets"]
    return e["dtype"], e["shape"], data[a:b]


def replica(world, layout, parts):
    """{name: (dtype, shape, bytes)} of every parameter of `parts`, the ranks
    of one data-parallel replica (all ranks, or with tensor parallelism the
    ranks of one place in the group): those saved whole from the first, the
    ZeRO shards' buckets put back together from all."""
    out = {}
    for name in layout["params"]:
        if name not in parts[0][0]:
            die(f"rank 0's part has no parameter '{name}' that its layout lists")
        out[name] = tensor_bytes(parts[0], name)
    for shard, d in layout["shards"].items():
        pieces = []
        for r, part in enumerate(parts):
            if shard not in part[0]:
                die(f"rank {r}'s part has no shard '{shard}'")
            dtype, _, b = tensor_bytes(part, shard)
            pieces.append(b)
        size = FORMATS[dtype]
        flat = b"".join(pieces)  # one bucket (a transformer block at ZeRO-3)
        if len(flat) != d["padded"] * size or d["padded"] % world:
            die(f"'{shard}': {len(flat) // size} elements over {world} ranks, the layout says "
                f"{d['padded']}")
        off, align = 0, max(1, d["align"])
        for name, shape in d["members"]:
            n = 1
            for s in shape:
                n *= s
            off = (off + align - 1) // align * align
            if off + n > d["padded"]:
                die(f"'{shard}': member '{name}' runs past the bucket")
            if name not in out:  # (a whole copy, ZeRO 1-2's, is the same values)
                out[name] = (dtype, shape, flat[off * size:(off + n) * size])
            off += n
    return out


def join_slices(name, pieces, dim, groups):
    """A tensor-parallel parameter whole again: along `dim` each of the
    group's T ranks holds part t of each of `groups` equal groups (a fused
    QKV: 3), so the whole tensor is, group by group, the ranks' parts in
    order."""
    dtype, shape, _ = pieces[0]
    if any(p[0] != dtype or list(p[1]) != list(shape) for p in pieces):
        die(f"'{name}': the ranks of a tensor-parallel group hold different shapes")
    if not 0 <= dim < len(shape) or groups < 1 or shape[dim] % groups:
        die(f"'{name}': a tensor-parallel slice [{dim}, {groups}] that its shape {shape} cannot be")
    size = FORMATS[dtype]
    outer = 1
    for s in shape[:dim]:
        outer *= s
    inner = size
    for s in shape[dim + 1:]:
        inner *= s
    per = shape[dim] // groups * inner  # bytes of one group's part in one row
    chunks = []
    for o in range(outer):
        base = o * shape[dim] * inner
        for g in range(groups):
            for p in pieces:
                chunks.append(p[2][base + g * per:base + (g + 1) * per])
    whole = list(shape)
    whole[dim] *= len(pieces)
    return dtype, whole, b"".join(chunks)


def export(m, parts):
    """{name: (dtype, shape, bytes)} of every parameter, whole. A pipeline's
    checkpoint (layout "pipeline_parallel" P) is P worlds of world / P ranks,
    one a stage (the outermost level), each with its stage's layout; a
    parameter two stages hold (a tied embedding) is the same on both."""
    layout = json.loads(parts[0][1]["layout"])
    ep = layout.get("expert_parallel", 1)
    if not isinstance(ep, int) or ep < 1 or m["world"] % ep:
        die(f"the layout's expert_parallel {ep!r} does not divide the world of {m['world']}")
    if ep > 1:
        # Expert parallelism: rank r holds the experts of place r mod N
        # whole (under their names) and its shards of the others' buckets,
        # which every place lays out alike.
        out = replica(m["world"], layout, parts)
        for j in range(1, ep):
            for name in json.loads(parts[j][1]["layout"])["params"]:
                if name not in parts[j][0]:
                    die(f"rank {j}'s part has no parameter '{name}' that its layout lists")
                out.setdefault(name, tensor_bytes(parts[j], name))
        return out
    pp = layout.get("pipeline_parallel", 1)
    if not isinstance(pp, int) or pp < 1 or m["world"] % pp:
        die(f"the layout's pipeline_parallel {pp!r} does not divide the world of {m['world']}")
    out = {}
    per = m["world"] // pp
    for s in range(pp):
        for name, t in export_world(dict(m, world=per), parts[s * per:(s + 1) * per]).items():
            out.setdefault(name, t)
    return out


def export_world(m, parts):
    """export() of one pipeline stage's ranks (or of the whole world)."""
    world = m["world"]
    layout = json.loads(parts[0][1]["layout"])
    tp = layout.get("tensor_parallel", 1)
    if not isinstance(tp, int) or tp < 1 or world % tp:
        die(f"the layout's tensor_parallel {tp!r} does not divide the world of {world}")
    # Tensor parallelism: rank r is place r mod T of its group (the
    # innermost ranks); each place's data-parallel replica is put back
    # together, then each split parameter from the T places.
    slices = layout.get("tp", {})
    if not isinstance(slices, dict) or not all(
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
            for v in slices.values()):
        die("the layout's tensor-parallel slices are not {name: [dim, groups]}")
    places = [replica(world // tp, layout, parts[t::tp]) for t in range(tp)]
    out = places[0]
    for name, (dim, groups) in slices.items():
        if name not in out:
            die(f"the layout splits '{name}', which no part holds")
        out[name] = join_slices(name, [p[name] for p in places], dim, groups)
    return out


def write(path, tensors, meta):
    header, off, blobs = {}, 0, []
    for name in tensors:
        dtype, shape, b = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(prog="loom-ckpt", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="the model's parameters, whole, in one safetensors file")
    e.add_argument("dir", help="a --checkpoint-dir")
    e.add_argument("-o", "--output", required=True, help="the safetensors file to write")
    s = sub.add_parser("show", help="the committed step and what its parts hold")
    s.add_argument("dir", help="a --checkpoint-dir")
    for p in (e, s):
        p.add_argument("--verify", action="store_true",
                       help="check every tensor's CRC-32C first (pure Python: a few MB/s)")
    a = ap.parse_args()
    m, parts = load(a.dir, a.verify)
    if a.cmd == "show":
        layout = json.loads(parts[0][1]["layout"])
        print(f"step {m['step']}, {m['world']} ranks, ZeRO stage {m.get('zero_stage')}, "
              f"model {m.get('model')}")
        print(f"{len(layout['params'])} parameters saved whole, "
              f"{len(layout['shards'])} sharded buckets")
        for r, part in enumerate(parts):
            total = sum(v["data_offsets"][1] - v["data_offsets"][0] for v in part[0].values())
            print(f"rank {r}: {len(part[0])} tensors, {total} bytes")
        return
    tensors = export(m, parts)
    write(a.output, tensors, {"format": "pt", "loom_step": str(m["step"]),
                              "loom_model": str(m.get("model", ""))})
    n = sum(len(t[2]) for t in tensors.values())
    print(f"loom-ckpt: wrote {len(tensors)} parameters ({n} bytes) of step {m['step']} "
          f"to {a.output}")


if __name__ == "__main__":
    main()
