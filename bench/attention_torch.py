#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on loomrt_bench attention's shapes.

Times the forward and the backward (one .backward of the output with a
given gradient) in bf16 on the GPU, causal and not, with CUDA events;
medians over --iters timed runs after two warm-ups. PyTorch picks its
backend (cuDNN or FlashAttention on an H100); the one it ran is reported.
Prints one JSON object per measurement, with the fields loomrt_bench
prints, so bench/run-attention-gpu.sh can put them side by side.
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F

SHAPES = [("gpt2", 16, 12, 1024, 64), ("llama", 4, 16, 2048, 128)]


def median_ms(fn, iters):
    times = []
    for i in range(iters + 2):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        if i >= 2:
            times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def backend_name(q, k, v, causal):
    """The SDPA kernel PyTorch's profiler sees for one forward."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages()]
    for tag in ("cudnn", "flash", "efficient", "fmha"):
        for n in names:
            if tag in n.lower():
                return tag
    return names[0] if names else "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("attention_torch.py: needs a CUDA GPU")
    torch.manual_seed(0)
    for name, batch, heads, t, dh in SHAPES:
        shape = (batch, heads, t, dh)
        q, k, v = (torch.rand(shape, device="cuda", dtype=torch.bfloat16) * 2 - 1
                   for _ in range(3))
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
        dout = torch.rand(shape, device="cuda", dtype=torch.bfloat16) * 2 - 1
        for causal in (1, 0):
            fwd_ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                               args.iters)
            out = [None]

            def step():
                out[0].backward(dout, retain_graph=True)

            out[0] = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
            bwd_ms = median_ms(step, args.iters)
            flops = 4.0 * batch * heads * t * t * dh * (0.5 if causal else 1.0)
            print(json.dumps({
                "bench": "attention", "impl": "torch_sdpa", "shape": name, "batch": batch,
                "heads": heads, "t": t, "dh": dh, "causal": causal,
                "fwd_ms": round(fwd_ms, 4), "bwd_ms": round(bwd_ms, 4),
                "fwd_tflops": round(flops / (fwd_ms * 1e9), 1),
                "bwd_tflops": round(2.5 * flops / (bwd_ms * 1e9), 1),
                "kernel": backend_name(q, k, v, bool(causal)),
                "torch": torch.__version__}), flush=True)
            q.grad = k.grad = v.grad = None


if __name__ == "__main__":
    main()
