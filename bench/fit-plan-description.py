#!/usr/bin/env python3
"""Fits the two values of bench/hardware/h200x2-plan-2026-11-30.json on the
6.7B Llama's five plans measured on 2 H200s (bench/RESULTS.md, 2026-11-30,
session 17: `--plan=auto`'s top five): for each (gpu_flops_efficiency,
gpu_kernel_efficiency, gpu_comm_overlap_slowdown) given, loomc predicts the
five plans on h200x2-kernels-2026-11-30 with those values and this prints
each prediction over its measurement and the largest error.

  python3 bench/fit-plan-description.py 1.0,0.75,0 0.82,0.75,0.6
(development machine, build/bin/loomc; about 20 s a setting on 2 cores).
"""
import json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(ROOT, "bench/hardware/h200x2-kernels-2026-11-30.json")
LOOMC = os.path.join(ROOT, os.environ.get("BUILD", "build"), "bin/loomc")
SPEC = "llama:layers=32,d_model=4096,heads=32,ffn=11008,vocab=32000,seq=1024,batch=8"
# (flags, measured step s): the median of steps 3-8.
MEASURED = [
    ("--zero-stage=3", 0.417),
    ("--tensor-parallel=2 --zero-stage=0", 0.437),
    ("--zero-stage=0", 0.447),
    ("--pipeline-parallel=2 --zero-stage=0 --micro-batches=4 --pipeline-schedule=interleaved:2", 0.457),
    ("--pipeline-parallel=2 --zero-stage=0 --micro-batches=2 --pipeline-schedule=interleaved:2", 0.470),
]

def main():
    tmp = tempfile.mkdtemp()
    for arg in sys.argv[1:] or ["1.0,0.75,0"]:
        fe, ke, sl = map(float, arg.split(","))
        d = json.load(open(BASE))
        d["gpu_flops_efficiency"], d["gpu_kernel_efficiency"] = fe, ke
        if sl > 0:
            d["gpu_comm_overlap_slowdown"] = sl
        hw = os.path.join(tmp, "hw.json")
        json.dump(d, open(hw, "w"))
        ratios = []
        for flags, meas in MEASURED:
            pj = os.path.join(tmp, "p.json")
            subprocess.run([LOOMC, "--model", SPEC, "--lr=3e-4", "--target=cuda", "--precision=bf16",
                            f"--hardware={hw}", "--topology=gpu=2", "--compile-to=schedule", "-o",
                            os.devnull, f"--prediction-json={pj}"] + flags.split(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            ratios.append(json.load(open(pj))["step_s"] / meas)
        print(f"flops {fe} kernels {ke} overlap {sl}: predicted/measured "
              + " ".join(f"{r:.3f}" for r in ratios)
              + f"; largest error {max(abs(r - 1) for r in ratios):.1%}", flush=True)

if __name__ == "__main__":
    main()
