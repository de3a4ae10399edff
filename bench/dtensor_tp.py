#!/usr/bin/env python3
"""The outside peer of issue 47's speed row: PyTorch's own tensor
parallelism (DTensor `parallelize_module`, the plan torchtitan applies to
Llama, adapted to Hugging Face's module names) with sequence parallelism
and the loss computed from each rank's vocabulary shard (`loss_parallel`),
on Hugging Face's LlamaForCausalLM, bf16 autocast over fp32 weights, SDPA
attention, AdamW. Every rank of the tensor-parallel group reads the same
batch, as Loom's --tensor-parallel ranks do.

    torchrun --nproc-per-node 2 bench/dtensor_tp.py --layers 32 --d 4096 --heads 32 \\
        --ffn 11008 --vocab 32000 --seq 1024 --batch 8

Rank 0 prints one JSON line: the median step after 3 warm-up steps, tokens
a second for the group, MFU (6 x parameters x tokens/s over 989 TFLOP/s a
GPU), the last loss and the peak memory.
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
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               loss_parallel, parallelize_module)

from llama_torch import add_shape_args, llama_config


def main():
    ap = argparse.ArgumentParser()
    add_shape_args(ap)
    ap.add_argument("--batch", type=int, default=8, help="sequences a step (the group's)")
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    mesh = init_device_mesh("cuda", (world,))
    cfg = llama_config(a)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = tf.LlamaForCausalLM(cfg).train()
    n = sum(p.numel() for p in model.parameters())
    # torchtitan's plan (torchtitan/models/llama3/infra/parallelize.py):
    # vocabulary-parallel embedding and head, sequence-parallel norms,
    # column-parallel q/k/v and gate/up, row-parallel o and down.
    # Hugging Face's modules read shapes (the rotary positions, the heads'
    # reshape) from the hidden states: they stay DTensors with their global
    # shape between the blocks (use_local_output=False where torchtitan's
    # own model takes local tensors).
    parallelize_module(model, mesh, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(),
                                              output_layouts=Shard(1), use_local_output=False),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                   use_local_output=False),
    })
    for layer in model.model.layers:
        parallelize_module(layer, mesh, {
            "input_layernorm": SequenceParallel(),
            # Hugging Face calls attention with keyword arguments.
            "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        })
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, foreach=True)
    g = torch.Generator(device="cuda").manual_seed(0)  # the same batch on every rank
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
    pos = torch.arange(a.seq, device="cuda").unsqueeze(0)  # the whole sequence's

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x, position_ids=pos).logits
        with loss_parallel():
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times, loss = [], None
    torch.cuda.reset_peak_memory_stats()
    for i in range(a.steps):
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    tps = a.batch * a.seq / s
    if rank == 0:
        print(json.dumps({"impl": f"torch {torch.__version__} DTensor TP + SP + loss_parallel",
                          "ranks": world, "params": n, "step_s": s, "tokens_per_s": tps,
                          "mfu": 6 * n * tps / (989e12 * world),
                          "loss": float((loss.full_tensor() if hasattr(loss, "full_tensor")
                                         else loss).detach()),
                          "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
