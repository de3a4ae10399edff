#!/usr/bin/env python3
"""Host<->GPU copies: loomrt beside PyTorch, in one run.

    python3 bench/copy_bw.py --bench build-bench/bin/loomrt_bench [--bytes 1e9]

Both sides copy the same number of bytes between pinned (or pageable) host
memory and the GPU; medians of --iters copies after two warm-ups, timed with
CUDA events. The mission's measured PCIe figure on the H100 host is 55 GB/s
per direction (pinned) and 89-95 GB/s both ways at once; the runtime's target
is >= 90% of it.
"""
import argparse
import json
import statistics
import subprocess
import sys


def torch_copies(nbytes, iters):
    import torch
    n = nbytes // 4
    pinned = torch.full((n,), 1.0).pin_memory()
    pinned2 = torch.full((n,), 2.0).pin_memory()
    pageable = torch.full((n,), 3.0)
    dev = torch.empty(n, device="cuda")
    dev2 = torch.full((n,), 4.0, device="cuda")
    s2 = torch.cuda.Stream()

    def timed(fn, mult=1):
        ts = []
        for i in range(iters + 2):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            if i >= 2:
                ts.append(a.elapsed_time(b))
        return mult * nbytes / (statistics.median(ts) * 1e-3) / 1e9

    def bidir():
        s2.wait_stream(torch.cuda.current_stream())
        dev.copy_(pinned, non_blocking=True)
        with torch.cuda.stream(s2):
            pinned2.copy_(dev2, non_blocking=True)
        torch.cuda.current_stream().wait_stream(s2)

    return {
        "h2d_pinned": timed(lambda: dev.copy_(pinned, non_blocking=True)),
        "d2h_pinned": timed(lambda: pinned.copy_(dev, non_blocking=True)),
        "bidir_pinned": timed(bidir, 2),
        "h2d_pageable": timed(lambda: dev.copy_(pageable, non_blocking=True)),
    }, torch.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="path to loomrt_bench")
    ap.add_argument("--bytes", type=float, default=1e9)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", help="append raw results to this file")
    a = ap.parse_args()
    nbytes = int(a.bytes) // 4 * 4
    out = subprocess.run([a.bench, "copy", "--backend", "cuda", "--bytes", str(nbytes),
                          "--iters", str(a.iters)], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"copy_bw.py: loomrt_bench failed: {out.stderr.strip()}")
    ours = {r["what"]: r["gb_s"] for r in map(json.loads, out.stdout.split("\n")[:-1])}
    theirs, version = torch_copies(nbytes, a.iters)
    print(f"\nHost<->GPU copies of {nbytes / 1e9:.2f} GB (GB/s; bidir counts both directions)")
    print(f"{'copy':14} {'loomrt':>8} {'torch ' + version:>22} {'ratio':>6}")
    for k in ours:
        print(f"{k:14} {ours[k]:>8.2f} {theirs[k]:>22.2f} {ours[k] / theirs[k]:>6.2f}")
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps({"ours": ours, "torch": theirs}) + "\n")


if __name__ == "__main__":
    main()
