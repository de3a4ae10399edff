#!/usr/bin/env python3
"""Adam/AdamW step: loomrt beside PyTorch, in one run, with the ratio.

    python3 bench/adam.py --bench build/bin/loomrt_bench --backend cpu --n 1e8
    python3 bench/adam.py --bench build-bench/bin/loomrt_bench --backend cuda --n 1e9

Both sides update the same number of fp32 parameters (AdamW, lr 1e-3,
weight decay 0.01) with non-zero data, time the median of --iters steps
after two warm-ups, and report G params/s and the DRAM/HBM traffic rate at
28 bytes per parameter (read p, g, m, v; write p, m, v). PyTorch runs its
fused AdamW where this PyTorch has it for the device, else its single-tensor
path (named in the table).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def torch_adam(device, n, iters, variant, mixed=False):
    import torch
    if device == "cpu":
        torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    base = (torch.arange(n, dtype=torch.float32) % 1000) * 1e-3
    p = torch.nn.Parameter((base + 0.1).to(device))
    p.grad = (base + 0.2).to(device)
    # The mixed-precision job: the gradient arrives as bf16, the GPU's next
    # step needs bf16 weights. PyTorch converts in separate passes.
    g16 = (base + 0.2).to(device=device, dtype=torch.bfloat16) if mixed else None
    p16 = torch.empty(n, device=device, dtype=torch.bfloat16) if mixed else None
    del base
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    try:
        opt = torch.optim.AdamW([p], **{variant: True}, **kw) if variant != "single" \
            else torch.optim.AdamW([p], foreach=False, **kw)
        opt.step()
    except (RuntimeError, TypeError, ValueError) as e:
        return None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for i in range(iters + 2):
        sync()
        t0 = time.perf_counter()
        if mixed:
            p.grad.copy_(g16)
            opt.step()
            p16.copy_(p.detach())
        else:
            opt.step()
        sync()
        if i >= 2:
            times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    name = {"fused": "fused=True", "foreach": "foreach=True",
            "single": "foreach=False"}[variant]
    what = "grad.copy_(g16); AdamW({}); p16.copy_(p)" if mixed else "AdamW({})"
    return {"impl": f"torch {torch.__version__} " + what.format(name), "ms": ms,
            "threads": torch.get_num_threads()}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="path to loomrt_bench")
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--n", type=float, default=1e8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--mixed", action="store_true",
                    help="the mixed-precision step: bf16 gradient in, bf16 weights out")
    ap.add_argument("--json", help="append raw results to this file")
    a = ap.parse_args()
    n = int(a.n)
    if not os.access(a.bench, os.X_OK):
        sys.exit(f"adam.py: {a.bench} is not an executable loomrt_bench")

    mode = "adam-mixed" if a.mixed else "adam"
    out = subprocess.run([a.bench, mode, "--backend", a.backend, "--n", str(n),
                          "--iters", str(a.iters)], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"adam.py: loomrt_bench failed: {out.stderr.strip()}")
    ours = json.loads(out.stdout.strip().splitlines()[-1])
    # PyTorch's fused path is the baseline where it exists; otherwise every
    # path this PyTorch has is measured and the fastest is the baseline.
    theirs = [r for r in (torch_adam(a.backend, n, a.iters, v, a.mixed)
                          for v in ("fused", "foreach", "single")) if r]
    if not theirs:
        sys.exit("adam.py: no PyTorch AdamW variant ran")
    if "fused" in theirs[0]["impl"]:
        theirs = theirs[:1]
    best = min(theirs, key=lambda r: r["ms"])

    copy = ours["copy_gb_s"]
    title = (f"\n{'Mixed-precision (bf16 grad in, bf16 weights out) ' if a.mixed else ''}"
             f"AdamW step over {n:.3g} fp32 parameters on {a.backend}")
    if copy:
        title += f" (device copy measured by loomrt: {copy:.0f} GB/s)"
    print(title)
    print(f"{'implementation':60} {'threads':>7} {'ms':>9} {'Gparam/s':>9} "
          f"{'GB/s*':>7} {'% copy':>7}")
    for r in [{"impl": "loomrt", **ours}] + theirs:
        gps = n / (r["ms"] * 1e-3) / 1e9
        gbs = 28 * gps
        pct = f"{100 * gbs / copy:>6.0f}%" if copy else f"{'-':>7}"
        print(f"{r['impl']:60} {r['threads']:>7} {r['ms']:>9.2f} {gps:>9.2f} "
              f"{gbs:>7.1f} {pct}")
    print("* GB/s at the 28 bytes per parameter the update needs at least")
    ratio = best["ms"] / ours["ms"]
    print(f"ratio loomrt / {best['impl']} (speed): {ratio:.2f}x")
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps({"ours": ours, "torch": theirs, "ratio": ratio}) + "\n")


if __name__ == "__main__":
    main()
