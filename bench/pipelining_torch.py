#!/usr/bin/env python3
"""The outside peer of issue 48's GPU row: PyTorch's own pipeline
parallelism (`torch.distributed.pipelining`) on Hugging Face's Llama
decoder layers built from a config (the shape loomc's llama generator
builds: SDPA attention, untied head), fp32 parameters with bf16 autocast
and fused AdamW (fp32 state), one GPU a rank.

The model is cut by hand into `--stages` stages of equal decoder layers
(the embedding on the first, the final norm and the head on the last).
`--schedule`:
  gpipe, 1f1b             one stage a rank (ScheduleGPipe, Schedule1F1B)
  interleaved-1f1b, interleaved-zb, zbv
                          two stages a rank (ScheduleInterleaved1F1B,
                          ScheduleInterleavedZeroBubble: stages r and r+P;
                          ScheduleZBVZeroBubble: the V placement, r and
                          2P-1-r)

    torchrun --nproc-per-node 2 bench/pipelining_torch.py --layers 32 --d 4096 \\
        --heads 32 --ffn 11008 --vocab 32000 --micro-batches 8 --schedule 1f1b

--micro-batch is sequences a micro-batch. Rank 0 prints one JSON line: the
median step of steps 3.., tokens/s of the pipeline (M x micro-batch x seq a
step), MFU over all GPUs (6 N tokens/s over 989 TFLOP/s a GPU), each
rank's peak memory and the last loss.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import pipelining as pp
from transformers.models.llama import modeling_llama as hf

from llama_torch import add_shape_args, llama_config


class Stage(nn.Module):
    """Decoder layers [lo, hi) of the model, with the embedding on the first
    stage and the final norm and head on the last."""

    def __init__(self, cfg, lo, hi, first, last):
        super().__init__()
        self.first, self.last = first, last
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size) if first else None
        self.layers = nn.ModuleList(hf.LlamaDecoderLayer(cfg, i) for i in range(lo, hi))
        self.rotary = hf.LlamaRotaryEmbedding(config=cfg)
        self.norm = hf.LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps) if last else None
        self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) if last else None

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = self.embed(x) if self.first else x
            pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
            pe = self.rotary(h, pos)
            for layer in self.layers:
                out = layer(h, position_embeddings=pe, position_ids=pos)
                h = out[0] if isinstance(out, tuple) else out
            if self.last:
                return self.head(self.norm(h)).float()
            return h


def main():
    ap = argparse.ArgumentParser()
    add_shape_args(ap)
    ap.add_argument("--micro-batch", type=int, default=1, help="sequences a micro-batch")
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--schedule", default="1f1b",
                    choices=["gpipe", "1f1b", "interleaved-1f1b", "interleaved-zb", "zbv"])
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    cfg = llama_config(a, eps=1e-6)
    per_rank = 1 if a.schedule in ("gpipe", "1f1b") else 2
    n_stages = world * per_rank
    if a.layers % n_stages:
        raise SystemExit(f"{a.layers} layers do not divide into {n_stages} stages")
    if a.schedule == "zbv":
        mine = [rank, 2 * world - 1 - rank]
    else:
        mine = [rank + k * world for k in range(per_rank)]
    per = a.layers // n_stages
    torch.manual_seed(0)
    mods, stages = [], []
    for s in mine:
        m = Stage(cfg, s * per, (s + 1) * per, s == 0, s == n_stages - 1).to(dev)
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.fill_(1.0) if "norm" in name else p.normal_(0.0, 0.02)
        mods.append(m)
        stages.append(pp.PipelineStage(m, s, n_stages, dev))
    params = [p for m in mods for p in m.parameters()]
    n_local = torch.tensor(sum(p.numel() for p in params), device=dev)
    dist.all_reduce(n_local)
    n = int(n_local)
    opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01, fused=True)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, a.vocab), target.reshape(-1))

    kinds = {"gpipe": pp.ScheduleGPipe, "1f1b": pp.Schedule1F1B,
             "interleaved-1f1b": pp.ScheduleInterleaved1F1B,
             "interleaved-zb": pp.ScheduleInterleavedZeroBubble, "zbv": pp.ScheduleZBVZeroBubble}
    kind = kinds[a.schedule]
    sched = kind(stages[0] if per_rank == 1 else stages, a.micro_batches, loss_fn=loss_fn)
    holds_first = 0 in mine
    holds_last = n_stages - 1 in mine
    g = torch.Generator(device=dev).manual_seed(0)
    times, losses = [], []
    torch.cuda.reset_peak_memory_stats()
    rows = a.micro_batch * a.micro_batches
    for step in range(a.steps):
        # Every rank draws the same batch: the first stage reads the
        # tokens, the last the targets.
        idx = torch.randint(0, a.vocab, (rows, a.seq), device=dev, generator=g)
        tgt = torch.randint(0, a.vocab, (rows, a.seq), device=dev, generator=g)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        losses = []
        args = (idx,) if holds_first else ()
        kw = {"target": tgt, "losses": losses} if holds_last else {}
        sched.step(*args, **kw)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dist.barrier()
        times.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"step {step}: {times[-1]:.3f} s", flush=True)
    step_s = statistics.median(times[3:] if len(times) > 4 else times)
    tokens = rows * a.seq / step_s
    peak = torch.tensor([torch.cuda.max_memory_reserved() / 2**30], device=dev)
    peaks = [torch.zeros_like(peak) for _ in range(world)]
    dist.all_gather(peaks, peak)
    loss = torch.tensor([float(sum(losses) / len(losses)) if losses else 0.0], device=dev)
    dist.all_reduce(loss)  # only the last stage's is non-zero
    if rank == 0:
        print(json.dumps({"impl": f"torch {torch.__version__} pipelining {kind.__name__}",
                          "stages": n_stages, "ranks": world, "micro_batches": a.micro_batches,
                          "micro_batch": a.micro_batch, "steps": [round(t, 4) for t in times],
                          "params": n, "step_s": step_s, "tokens_per_s": tokens,
                          "mfu": 6 * n * tokens / (989e12 * world), "loss": float(loss),
                          "peak_reserved_gib": [round(float(p), 1) for p in peaks]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
