#!/usr/bin/env python3
"""PyTorch peer for Loom's expert parallelism (issue 52): the model of
loomc's `moe` generator (Llama attention with RoPE and grouped key/value
heads, RMSNorm, a router, top-k gates renormalised, SwiGLU experts, an
untied head, the load-balancing loss) with its experts split over the
ranks as GShard and DeepSpeed-MoE do: a capacity factor (GShard's slot
order: every token's first choice, then the second), the dispatch buffer
[E x C, D] sent to the experts' ranks and the outputs brought back by
torch.distributed.nn.functional.all_to_all_single (differentiable), each
rank's E/N experts run as one batched product over their N x C rows.
The shared parameters are averaged by DDP (overlapped with the backward);
the experts are left out of it and their gradients scaled by 1/N (the
step's gradient is the mean over the ranks' losses, as in Loom). bf16
autocast over fp32 weights, SDPA attention, fused AdamW.

    torchrun --nproc_per_node=2 bench/moe_ep_torch.py [--layers 12] [--d 2048]
        [--heads 16] [--kv-heads 8] [--ffn 11264] [--experts 8] [--top-k 2]
        [--capacity 1.25] [--aux 0.001] [--vocab 32000] [--seq 1024] [--batch 8]
        [--steps 12]

--batch is each rank's sequences. Rank 0 prints one JSON line: the median
step after 3 warm-up steps, the world's tokens/s, the last loss, the peak
memory PyTorch reserved and the parameter counts.
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnn
import torch.nn as nn
import torch.nn.functional as F


def rope(x, theta=10000.0):
    """Rotary embeddings over the last dimension of x [B, T, H, hd]
    (Hugging Face's rotate_half layout)."""
    T, hd = x.shape[1], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd)
    ang = torch.outer(torch.arange(T, device=x.device, dtype=torch.float32), inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1)[None, :, None, :].to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[None, :, None, :].to(x.dtype)
    a, b = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-b, a], -1) * sin


class MoE(nn.Module):
    def __init__(self, a, world):
        super().__init__()
        self.E, self.K, self.N, self.cap = a.experts, a.top_k, world, a.capacity
        self.local = a.experts // world
        self.gate = nn.Linear(a.d, a.experts, bias=False)
        std = 0.02
        self.w1 = nn.Parameter(torch.randn(self.local, a.ffn, a.d) * std)
        self.w3 = nn.Parameter(torch.randn(self.local, a.ffn, a.d) * std)
        self.w2 = nn.Parameter(torch.randn(self.local, a.d, a.ffn) * std)

    def forward(self, h):
        n, D = h.shape
        E, K = self.E, self.K
        h = h.to(torch.bfloat16)  # (the exchange in bf16, as Loom's)
        logits = self.gate(h).float()
        probs = F.softmax(logits, dim=-1)
        gates, idx = torch.topk(probs, K, dim=-1)
        gates = gates / gates.sum(-1, keepdim=True)
        C = n if self.cap == 0 else min(n, max(1, math.ceil(self.cap * n * K / E)))
        # GShard's order: choice-major, then tokens; a choice past its
        # expert's C slots is dropped.
        flat = idx.t().reshape(-1)                       # [K n]
        onehot = F.one_hot(flat, E)
        pos = (onehot.cumsum(0) - 1).gather(1, flat[:, None]).squeeze(1)
        keep = pos < C
        slot = (flat * C + pos)[keep]
        tok = torch.arange(n, device=h.device).repeat(K)[keep]
        g = gates.t().reshape(-1)[keep]
        buf = h.new_zeros(E * C, D).index_copy(0, slot, h[tok])
        recv = dnn.all_to_all_single(torch.empty_like(buf), buf)
        x = recv.view(self.N, self.local, C, D).transpose(0, 1).reshape(self.local, self.N * C, D)
        y = torch.bmm(F.silu(torch.bmm(x, self.w1.transpose(1, 2))) *
                      torch.bmm(x, self.w3.transpose(1, 2)), self.w2.transpose(1, 2))
        back = y.view(self.local, self.N, C, D).transpose(0, 1).reshape(E * C, D)
        out_buf = dnn.all_to_all_single(torch.empty_like(back), back)
        out = h.new_zeros(n, D).index_add(0, tok, out_buf[slot] * g[:, None].to(out_buf.dtype))
        # The load-balancing loss on this rank's tokens, one layer's term
        # of Hugging Face's load_balancing_loss_func (Loom's pools the
        # layers first: the same work).
        mask = F.one_hot(idx, E).float().sum(1)
        aux = (mask.mean(0) * probs.mean(0)).sum() * E
        return out, aux


class Block(nn.Module):
    def __init__(self, a, world):
        super().__init__()
        self.H, self.KV, self.hd = a.heads, a.kv_heads, a.d // a.heads
        self.n1 = nn.RMSNorm(a.d, eps=1e-6)
        self.n2 = nn.RMSNorm(a.d, eps=1e-6)
        self.q = nn.Linear(a.d, a.d, bias=False)
        self.k = nn.Linear(a.d, self.KV * self.hd, bias=False)
        self.v = nn.Linear(a.d, self.KV * self.hd, bias=False)
        self.o = nn.Linear(a.d, a.d, bias=False)
        self.moe = MoE(a, world)

    def forward(self, x):
        B, T, D = x.shape
        h = self.n1(x)
        q = rope(self.q(h).view(B, T, self.H, self.hd)).transpose(1, 2)
        k = rope(self.k(h).view(B, T, self.KV, self.hd)).transpose(1, 2)
        v = self.v(h).view(B, T, self.KV, self.hd).transpose(1, 2)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(att.transpose(1, 2).reshape(B, T, D))
        m, aux = self.moe(self.n2(x).reshape(B * T, D))
        return x + m.view(B, T, D), aux


class Model(nn.Module):
    def __init__(self, a, world):
        super().__init__()
        self.aux = a.aux
        self.emb = nn.Embedding(a.vocab, a.d)
        self.blocks = nn.ModuleList(Block(a, world) for _ in range(a.layers))
        self.norm = nn.RMSNorm(a.d, eps=1e-6)
        self.head = nn.Linear(a.d, a.vocab, bias=False)

    def forward(self, x, y):
        h = self.emb(x)
        aux = 0.0
        for b in self.blocks:
            h, a = b(h)
            aux = aux + a
        logits = self.head(self.norm(h)).float()
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        return loss + self.aux * aux


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("layers", 12), ("d", 2048), ("heads", 16), ("kv-heads", 8),
                          ("ffn", 11264), ("experts", 8), ("top-k", 2), ("vocab", 32000),
                          ("seq", 1024), ("batch", 8), ("steps", 12)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--capacity", type=float, default=1.25)
    ap.add_argument("--aux", type=float, default=0.001)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    torch.manual_seed(rank)
    model = Model(a, world).cuda()
    experts = [n for n, _ in model.named_parameters() if ".moe.w" in n]
    nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, experts)
    ddp = nn.parallel.DistributedDataParallel(model)
    expert_params = [p for n, p in model.named_parameters() if n in experts]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    times, loss = [], None
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(x, y)
        loss.backward()
        for p in expert_params:
            p.grad.div_(world)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step = statistics.median(times[3:])
    total = sum(p.numel() for p in model.parameters())
    expert_n = sum(p.numel() for p in expert_params)
    if rank == 0:
        print(json.dumps({
            "impl": f"PyTorch {torch.__version__} eager, EP={world} all_to_all_single, DDP",
            "step_ms": step * 1e3, "tokens_per_s": world * a.batch * a.seq / step,
            "loss": loss.item(), "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
            "params_per_rank": total, "expert_params_per_rank": expert_n}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
