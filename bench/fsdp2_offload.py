#!/usr/bin/env python3
"""The outside peer of the multi-GPU offload benchmark
(bench/run-offload-4gpu.sh): PyTorch FSDP2 (`fully_shard`, one unit per
block and the root) with `CPUOffloadPolicy` (sharded fp32 parameters,
gradients and AdamW state in pinned host memory, the optimizer step on the
CPU) and `MixedPrecisionPolicy` (bf16 compute, fp32 gradient reduction),
on the same GPT as bench/gpt2_torch.py (GPT-2 blocks, tied embedding).

    torchrun --nproc-per-node 4 bench/fsdp2_offload.py --layers 44 --width 6144 --heads 48 \\
        --vocab 50304 --batch 1

--batch is each rank's. Rank 0 prints one JSON line: the median step after
warm-up and its parts (forward+backward, optimizer step), the parameter
count and the last loss.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from gpt2_torch import GPT


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=44)
    ap.add_argument("--width", type=int, default=6144)
    ap.add_argument("--heads", type=int, default=48)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1, help="sequences a rank")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--device-memory", type=float, default=0,
                    help="GiB PyTorch's allocator may take (set_per_process_memory_fraction)")
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    if a.device_memory > 0:
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.device_memory * 2**30 / total))
    torch.manual_seed(0)
    with torch.device("meta"):
        model = GPT(a.layers, a.width, a.heads, a.vocab, a.seq)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    off = CPUOffloadPolicy(pin_memory=True)
    for blk in model.blocks:
        fully_shard(blk, mp_policy=mp, offload_policy=off)
    fully_shard(model, mp_policy=mp, offload_policy=off)
    model.to_empty(device="cpu")
    t0 = time.perf_counter()
    with torch.no_grad():
        # GPT-2's initialisation on each rank's shard (values do not matter
        # for the timing, their distribution does for the loss).
        for name, p in model.named_parameters():
            local = p.to_local()
            if name.endswith("bias"):
                local.zero_()
            elif "ln" in name:
                local.fill_(1.0)
            elif local.is_cpu:
                # Drawn on the GPU and copied (a 6B model's draws take ~30 s
                # on the host's CPU).
                local.copy_(torch.empty(local.shape, device="cuda").normal_(0.0, 0.02))
            else:
                local.normal_(0.0, 0.02)
    n = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    init_s = time.perf_counter() - t0
    g = torch.Generator(device="cuda").manual_seed(rank)
    times = []
    loss = None
    for step in range(a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        loss.backward()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        times.append((t2 - t0, t1 - t0, t2 - t1))
        if rank == 0:
            print(f"step {step}: {t2 - t0:.3f} s (forward+backward {t1 - t0:.3f} s, "
                  f"optimizer {t2 - t1:.3f} s), loss {float(loss):.4f}", flush=True)
    warm = times[1:] if len(times) > 1 else times
    med = lambda k: statistics.median(t[k] for t in warm)
    if rank == 0:
        print(json.dumps({"params": n, "ranks": dist.get_world_size(), "batch_per_rank": a.batch,
                          "step_s": med(0), "forward_backward_s": med(1), "optimizer_s": med(2),
                          "init_s": init_s, "loss": float(loss), "device_memory_gib": a.device_memory,
                          "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
