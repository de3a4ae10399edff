#!/usr/bin/env python3
"""PyTorch baseline for the GPT-2 124M training throughput: eager mode, bf16
autocast, fused attention (scaled_dot_product_attention), fused AdamW - the
configuration the mission measured at 296k tokens/s on an H100.

    python3 bench/gpt2_torch.py [--batch 16] [--seq 1024] [--steps 20] [--compile] [--fp32] [--vocab 50257]

Prints one JSON line: tokens/s (median step after warm-up) and the last loss.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers=12, d=768, h=12, vocab=50257, seq=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--vocab", type=int, default=50257,
                    help="50304: nanoGPT's padded size (a multiple of 64)")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--fp32", action="store_true",
                    help="no autocast: fp32 throughout (TF32 off, PyTorch's default)")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = GPT(vocab=a.vocab, seq=a.seq).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.01, fused=True)
    step = torch.compile(model) if a.compile else model
    x = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    times = []
    for i in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not a.fp32):
            loss = step(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    print(json.dumps({"impl": "torch " + torch.__version__ + (" compile" if a.compile else " eager"),
                      "precision": "fp32" if a.fp32 else "bf16 autocast",
                      "batch": a.batch, "seq": a.seq, "vocab": a.vocab, "step_ms": ms,
                      "tokens_per_s": a.batch * a.seq / (ms * 1e-3), "loss": loss.item()}))


if __name__ == "__main__":
    main()
