#!/usr/bin/env python3
"""PyTorch baseline for a Llama-style model's training throughput: Hugging
Face's LlamaForCausalLM built from a config (random weights), eager mode,
bf16 autocast over fp32 weights, SDPA attention, fused AdamW: the same
recipe as bench/gpt2_torch.py, at the shape loomc's llama generator builds
(RMSNorm, rotary embeddings, SwiGLU, no biases, untied head).

    python3 bench/llama_torch.py [--layers 16] [--d 2048] [--heads 16] [--ffn 8192]
                                 [--vocab 32000] [--seq 1024] [--batch 8] [--steps 20] [--compile]

Prints one JSON line: tokens/s (median step after 3 warm-up steps) and the
last loss.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import transformers as tf


def add_shape_args(ap):
    """--layers --d --heads --ffn --vocab --seq, defaulting to the landed
    Llama 6.7B (32 layers, d 4096, ffn 11008, vocabulary 32000, 1024
    tokens): the shape flags of the multi-GPU peers."""
    for name, default in (("layers", 32), ("d", 4096), ("heads", 32), ("ffn", 11008),
                          ("vocab", 32000), ("seq", 1024)):
        ap.add_argument(f"--{name}", type=int, default=default)


def llama_config(a, kv_heads=None, eps=1e-5):
    """Hugging Face's LlamaConfig at the shape of loomc's llama generator
    (`a`: --layers, --d, --heads, --ffn, --vocab, --seq), SDPA attention;
    the benchmarks' PyTorch peers build their model from it."""
    cfg = tf.LlamaConfig(vocab_size=a.vocab, hidden_size=a.d, intermediate_size=a.ffn,
                         num_hidden_layers=a.layers, num_attention_heads=a.heads,
                         num_key_value_heads=kv_heads or a.heads, max_position_embeddings=a.seq,
                         rope_theta=10000.0, rms_norm_eps=eps, tie_word_embeddings=False,
                         use_cache=False, attention_dropout=0.0)
    cfg._attn_implementation = "sdpa"
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="after the timed steps, print the GPU kernels of 3 more steps "
                         "(torch.profiler), largest first")
    a = ap.parse_args()
    cfg = llama_config(a)
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
    fwd = torch.compile(model) if a.compile else model
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(input_ids=x).logits
            loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times = []
    for i in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    if a.profile:
        acts = [torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        rows = [(e.device_time_total, e.count, e.key) for e in prof.key_averages()
                if e.device_time_total > 0]
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows)
        print(f"total kernel time a step: {total / 3e3:.1f} ms", file=sys.stderr)
        print("| share | ms/step | calls/step | kernel |", file=sys.stderr)
        print("|---|---|---|---|", file=sys.stderr)
        for t, c, k in rows[:25]:
            print(f"| {100 * t / total:.1f}% | {t / 3e3:.2f} | {c / 3:.0f} | {k[:100]} |",
                  file=sys.stderr)
    print(json.dumps({"impl": "torch " + torch.__version__ + (" compile" if a.compile else " eager"),
                      "model": f"llama L{a.layers} d{a.d} h{a.heads} ffn{a.ffn} v{a.vocab}",
                      "precision": "bf16 autocast", "batch": a.batch, "seq": a.seq,
                      "step_ms": ms, "tokens_per_s": a.batch * a.seq / (ms * 1e-3),
                      "loss": loss.item()}))


if __name__ == "__main__":
    main()
