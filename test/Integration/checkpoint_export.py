#!/usr/bin/env python3
"""loom-ckpt export (issue 46): a data-parallel checkpoint, whatever ZeRO
stage and world wrote it, becomes one safetensors file of the model's
parameters under their names, which the PyTorch model the test writes from
the architecture (loomtest.gpt, float64) takes as it is: its loss on the
next step's batch is the loss the uninterrupted binary logs for that step
(within 2e-6 relative: the binary's float32 against float64). Checked for
ZeRO 0 and 3 on 2 ranks, ZeRO-3 on 4, and ZeRO-1 with offloaded master
shards on 2 (shards and whole copies in one part). The names and shapes
are the generator's; a missing folder, a manifest that names a missing
part and a damaged tensor (--verify) are refused with one line."""
import json
import os
import struct
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import gpt, gpt_run_setup, read_st  # noqa: E402
from mpitest import train  # noqa: E402

KEYS = "layers=2,d_model=16,heads=2,vocab=32,seq=8,batch=8"
STEPS = 6


def main():
    a, cfg, data, tokens, init = gpt_run_setup(KEYS)
    loomc = os.path.join(a.bin, "loomc")
    ckpt = os.path.join(a.bin, "loom-ckpt")
    T = cfg["seq"]
    gbt, n = cfg["batch"] * T, len(tokens)
    off = ((STEPS - 1) * gbt) % (n - gbt - 1)  # the last step's global batch
    x = torch.tensor(tokens[off:off + gbt]).view(cfg["batch"], T)
    y = torch.tensor(tokens[off + 1:off + gbt + 1]).view(cfg["batch"], T)
    bad = 0
    for ranks, stage, extra in ((2, 0, []), (2, 3, []), (4, 3, []),
                                (2, 1, ["--optimizer-offload=cpu"])):
        tag = f"r{ranks}z{stage}" + ("off" if extra else "")
        exe = os.path.join(a.tmp, tag)
        subprocess.run([loomc, "--model", f"gpt:{KEYS}", f"--topology=gpu={ranks}",
                        f"--zero-stage={stage}", "--bucket-size=1000", *extra, "-o", exe],
                       check=True, capture_output=True)
        want = train(exe, ranks, data, STEPS, exe + ".log")[-1]["loss"]
        ck = os.path.join(a.tmp, "ck-" + tag)
        train(exe, ranks, data, STEPS - 1, exe + ".a.log", "--checkpoint-dir", ck,
              "--checkpoint-every", str(STEPS - 1))
        out = os.path.join(a.tmp, tag + ".safetensors")
        subprocess.run([ckpt, "export", ck, "-o", out, "--verify"], check=True,
                       capture_output=True)
        p = read_st(out)
        names = sorted(p) == sorted(init) and all(p[k].shape == init[k].shape for k in p)
        loss = gpt({k: v.double() for k, v in p.items()}, x, y, cfg).item()
        rel = abs(loss - want) / abs(want)
        ok = names and rel <= 2e-6
        bad += not ok
        print(f"{ranks} ranks, ZeRO-{stage}{' offloaded' if extra else ''}: "
              f"{'the generator names and shapes' if names else 'OTHER NAMES'}; PyTorch's loss "
              f"on step {STEPS} {'within 2e-6' if rel <= 2e-6 else 'NOT within 2e-6'} of the "
              f"binary's" + ("" if ok else f" ({loss} vs {want})"))

    def refused(what, path):
        r = subprocess.run([ckpt, "export", path, "-o", os.path.join(a.tmp, "x.safetensors"),
                            "--verify"], capture_output=True, text=True)
        print(f"{what}: ({r.returncode}) {r.stderr.strip()}")

    refused("missing", os.path.join(a.tmp, "none"))
    ck = os.path.join(a.tmp, "ck-r2z3")
    part = os.path.join(ck, json.load(open(os.path.join(ck, "checkpoint.json")))["parts"][1])
    raw = bytearray(open(part, "rb").read())
    (hn,) = struct.unpack("<Q", raw[:8])
    raw[8 + hn + 100] ^= 0xFF  # a byte of the first tensor
    open(part, "wb").write(bytes(raw))
    refused("damaged", ck)
    os.remove(part)
    refused("part gone", ck)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
