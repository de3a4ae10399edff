#!/usr/bin/env python3
"""Activation checkpointing per block on exports others wrote (issue 43):
Hugging Face models from the zoo, exported by PyTorch's dynamo exporter,
whose blocks loom-autodiff finds from the initializers' names
(`transformer.h.0.*`, `model.layers.0.*`, `encoder.layer.0.*`). Each is
trained 5 steps on the CPU with --recompute=none, full and selective: the
recomputed forward is the same arithmetic on the same values, so the
losses must be equal to every bit; and full recompute must shrink the
predicted step arena (it found blocks to checkpoint).

    recompute.py --bin BIN --zoo ZOO --tmp TMP NAME...
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from check_zoo import compile_cmd  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--zoo", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("names", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    bad = []
    for name in a.names:
        ref = json.load(open(os.path.join(a.zoo, f"{name}.json")))
        # The zoo's own compile line (optimizer and frozen buffers).
        base = compile_cmd(a, name, ref) + ["--hardware=cpu-host"]
        losses, arena = {}, {}
        for mode in ("none", "full", "selective"):
            exe = os.path.join(a.tmp, f"{name}-{mode}")
            subprocess.run(base + [f"--recompute={mode}", "--timeline", exe + ".tl.json", "-o", exe],
                           check=True, capture_output=True)
            arena[mode] = json.load(open(exe + ".tl.json"))["loom_prediction"]["step_arena_bytes"]
            log = exe + ".jsonl"
            if os.path.exists(log):
                os.remove(log)
            subprocess.run([exe, "--data", os.path.join(a.zoo, "tokens.bin"), "--steps", "5",
                            "--log-json", log], check=True, capture_output=True)
            losses[mode] = [json.loads(line)["loss"] for line in open(log)]
        same = all(losses[m] == losses["none"] for m in ("full", "selective")) and \
            len(losses["none"]) == 5
        smaller = arena["full"] < arena["none"]
        ok = same and smaller
        bad += [] if ok else [name]
        print(f"{name:16} {'ok' if ok else 'FAIL'}  losses {'equal' if same else 'DIFFERENT'}; "
              f"step arena full/none {arena['full'] / arena['none']:.2f}")
    if bad:
        sys.exit(f"recompute changed the losses or saved nothing: {bad}")


if __name__ == "__main__":
    main()
