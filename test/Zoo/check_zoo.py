#!/usr/bin/env python3
"""Checks the model zoo (make_zoo.py's exports): each model is compiled by
loomc for the CPU, trained by its binary for the recorded number of steps on
the recorded tokens, and its per-step losses compared with PyTorch's
(fp32 AdamW on the CPU) to an absolute 1e-5. Standard library only (CI has
no transformers).
    check_zoo.py --bin BIN_DIR --zoo ZOO_DIR --tmp TMP [NAME ...]
Prints one line per model and exits non-zero if any fails.
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys

TOL = 1e-5


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, (p.stderr.strip().splitlines() or [""])[-1]


def check(a, name):
    ref = json.load(open(os.path.join(a.zoo, f"{name}.json")))
    model = os.path.join(a.zoo, f"{name}.onnx")
    exe = os.path.join(a.tmp, name)
    cmd = [os.path.join(a.bin, "loomc"), model, "-o", exe,
           "--lr", str(ref["optimizer"]["lr"]), "--beta1", str(ref["optimizer"]["betas"][0]),
           "--beta2", str(ref["optimizer"]["betas"][1]), "--eps", str(ref["optimizer"]["eps"]),
           "--weight-decay", str(ref["optimizer"]["weight_decay"])]
    if ref["frozen"]:
        cmd.append("--frozen=" + ",".join(ref["frozen"]))
    rc, err = run(cmd)
    if rc:
        return f"{name:16} FAIL compile: {err}"
    log = os.path.join(a.tmp, f"{name}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    rc, err = run([exe, "--data", os.path.join(a.zoo, "tokens.bin"), "--steps",
                   str(ref["steps"]), "--log-json", log])
    if rc:
        return f"{name:16} FAIL run: {err}"
    got = [json.loads(line)["loss"] for line in open(log)]
    want = ref["losses"]
    if len(got) != len(want) or any(g is None for g in got):
        return f"{name:16} FAIL losses {got}"
    # Each step within 1e-5 of PyTorch's float32 loss, or (where float32
    # arithmetic alone moves PyTorch further: Adam amplifies rounding) within
    # twice the distance of PyTorch float32 from PyTorch float64.
    f64 = ref.get("losses_f64", want)
    bounds = [max(TOL, 2 * abs(w - d)) for w, d in zip(want, f64)]
    worst = max(abs(g - w) / b for g, w, b in zip(got, want, bounds))
    diff = max(abs(g - w) for g, w in zip(got, want))
    verdict = "ok  " if worst <= 1 and all(math.isfinite(g) for g in got) else "FAIL"
    return (f"{name:16} {verdict} {len(got)} steps  loss {got[0]:.5f} -> {got[-1]:.5f}  "
            f"max |loom - torch32| {diff:.1e}, {worst:.2f} of the bound "
            f"(max(1e-5, 2 |torch32 - torch64|))")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--zoo", required=True)
    p.add_argument("--tmp", required=True)
    p.add_argument("names", nargs="*")
    a = p.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    names = a.names or sorted(os.path.basename(f)[:-5]
                              for f in glob.glob(os.path.join(a.zoo, "*.json")))
    lines = [check(a, n) for n in names]
    print("\n".join(lines))
    sys.exit(1 if any(" FAIL " in l for l in lines) else 0)


if __name__ == "__main__":
    main()
