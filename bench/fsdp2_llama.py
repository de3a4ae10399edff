#!/usr/bin/env python3
"""The outside peer of bench/run-zero3-gpu.sh (issue 43): PyTorch FSDP2
(`fully_shard` on every decoder layer and on the root, the default
`reshard_after_forward=True`: ZeRO-3) with `MixedPrecisionPolicy` (bf16
parameters and compute, fp32 gradient reduction), fused AdamW (fp32 state
on the GPU), on Hugging Face's LlamaForCausalLM built from a config (SDPA
attention, untied head: the shape loomc's llama generator builds).
`--ac` wraps every decoder layer in activation checkpointing
(`checkpoint_wrapper`, non-reentrant: the layer's input is kept and the
layer runs again in its backward), as torchtitan's `--activation_checkpoint.mode full`.
`--offload` adds `CPUOffloadPolicy` (sharded fp32 parameters, gradients and
AdamW state in pinned host memory, the optimizer step on the CPU: the
peer of loomc --optimizer-offload); `--device-memory GiB` caps what
PyTorch's allocator may take (`set_per_process_memory_fraction`), the peer
of the binary's --device-memory.

    torchrun --nproc-per-node 2 bench/fsdp2_llama.py --layers 32 --d 4096 --heads 32 \\
        --ffn 11008 --vocab 32000 --batch 4 [--ac]

--batch is each rank's. Rank 0 prints one JSON line: the median step of
steps 3.., tokens/s over all ranks, MFU (6 N tokens/s over 989 TFLOP/s a
GPU), the peak memory PyTorch's allocator reserved and the last loss.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import transformers as tf
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from llama_torch import add_shape_args, llama_config


def main():
    ap = argparse.ArgumentParser()
    add_shape_args(ap)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--batch", type=int, default=4, help="sequences a rank")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ac", action="store_true", help="activation checkpointing per layer")
    ap.add_argument("--offload", action="store_true", help="CPUOffloadPolicy (optimizer on the CPU)")
    ap.add_argument("--device-memory", type=float, default=0, help="GiB the allocator may take")
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    if a.device_memory > 0:
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.device_memory * 2**30 / total))
    cfg = llama_config(a, a.kv_heads, eps=1e-6)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(cfg)
    if a.ac:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        for i, layer in enumerate(model.model.layers):
            model.model.layers[i] = checkpoint_wrapper(layer)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kw = {"offload_policy": CPUOffloadPolicy(pin_memory=True)} if a.offload else {}
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp, **kw)
    fully_shard(model, mp_policy=mp, **kw)
    model.to_empty(device="cpu" if a.offload else "cuda")
    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p.to_local()
            if "norm" in name:
                local.fill_(1.0)
            elif local.is_cpu:
                # Drawn on the GPU and copied: a 7B model's normal draws
                # take ~30 s on the host's CPU, and the values do not matter
                # for the timing (their distribution does for the loss).
                local.copy_(torch.empty(local.shape, device="cuda").normal_(0.0, 0.02))
            else:
                local.normal_(0.0, 0.02)
    # Rotary tables are buffers, not parameters: made again on the device.
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg, device="cuda")
    model.train()
    n = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
    g = torch.Generator(device="cuda").manual_seed(rank)
    times, loss = [], None
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        logits = model(input_ids=idx).logits
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"step {step}: {times[-1]:.3f} s, loss {float(loss):.4f}", flush=True)
    step_s = statistics.median(times[3:] if len(times) > 4 else times)
    world = dist.get_world_size()
    tokens = a.batch * a.seq * world / step_s
    if rank == 0:
        print(json.dumps({"impl": f"torch {torch.__version__} FSDP2" + (" + AC per layer" if a.ac else "")
                          + (" + CPUOffloadPolicy" if a.offload else ""),
                          "steps": [round(t, 4) for t in times],
                          "params": n, "ranks": world, "batch_per_rank": a.batch,
                          "step_s": step_s, "tokens_per_s": tokens,
                          "mfu": 6 * n * tokens / (989e12 * world), "loss": float(loss),
                          "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
                          "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
