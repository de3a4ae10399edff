#!/usr/bin/env python3
"""PyTorch's own CPU-offload path, the outside baseline of the offload
benchmark (bench/run-offload-big.sh): the model in bf16 on the GPU, fp32
master weights and fused AdamW on the CPU, each step the gradients copied to
the host (as fp32) and the updated weights copied back from pageable memory.
Same GPT as bench/gpt2_torch.py (GPT-2 blocks, tied embedding).

    python3 bench/offload_torch.py --layers 24 --d 4096 --heads 32 --vocab 32000 --batch 2

Prints one JSON line: median step time after warm-up and its parts.
"""
import argparse
import json
import statistics
import time

import torch

from gpt2_torch import GPT


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = GPT(a.layers, a.d, a.heads, a.vocab, a.seq).to(torch.bfloat16).cuda()
    params = [p for p in model.parameters()]
    master = [p.detach().float().cpu() for p in params]
    for m in master:
        m.grad = torch.zeros_like(m)
    opt = torch.optim.AdamW(master, lr=1e-4, fused=True)
    n = sum(p.numel() for p in params)
    times = []
    for step in range(a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        loss.backward()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        for p, m in zip(params, master):
            m.grad.copy_(p.grad)  # bf16 on the GPU -> fp32 on the host
            p.grad = None
        opt.step()
        t2 = time.perf_counter()
        with torch.no_grad():
            for p, m in zip(params, master):
                p.copy_(m)  # pageable fp32 -> bf16 on the GPU
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        times.append((t3 - t0, t1 - t0, t2 - t1, t3 - t2))
    warm = times[1:] if len(times) > 1 else times
    med = lambda k: statistics.median(t[k] for t in warm)
    print(json.dumps({"params": n, "step_s": med(0), "forward_backward_s": med(1),
                      "grad_copy_and_cpu_adamw_s": med(2), "param_copy_back_s": med(3),
                      "loss": float(loss)}))


if __name__ == "__main__":
    main()
