#!/usr/bin/env python3
"""PyTorch baseline for a mixture-of-experts model's training throughput on
one GPU: Hugging Face's MixtralForCausalLM built from a config (random
weights; transformers 5 runs its experts with torch's grouped GEMM), eager,
bf16 autocast over fp32 weights, SDPA attention, fused AdamW, the
load-balancing loss added (router_aux_loss_coef): the recipe of
bench/llama_torch.py at the shape of loomc's `moe` generator (dropless, as
Hugging Face's block is).

    python3 bench/mixtral_torch.py [--layers 8] [--d 2048] [--heads 16] [--kv-heads 8]
        [--ffn 2816] [--experts 8] [--top-k 2] [--vocab 32000] [--seq 1024] [--batch 8]
        [--aux 0.001] [--steps 20]

Prints one JSON line: tokens/s (median step after 3 warm-up steps), the
last loss and the active parameters a token uses.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
import transformers as tf


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("layers", 8), ("d", 2048), ("heads", 16), ("kv-heads", 8),
                          ("ffn", 2816), ("experts", 8), ("top-k", 2), ("vocab", 32000),
                          ("seq", 1024), ("batch", 8), ("steps", 20)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--aux", type=float, default=0.001)
    a = ap.parse_args()
    cfg = tf.MixtralConfig(vocab_size=a.vocab, hidden_size=a.d, intermediate_size=a.ffn,
                           num_hidden_layers=a.layers, num_attention_heads=a.heads,
                           num_key_value_heads=a.kv_heads, num_local_experts=a.experts,
                           num_experts_per_tok=a.top_k, max_position_embeddings=a.seq,
                           rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                           router_aux_loss_coef=a.aux, output_router_logits=True,
                           sliding_window=None, use_cache=False, attention_dropout=0.0)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = tf.MixtralForCausalLM(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x, output_router_logits=True)
            loss = F.cross_entropy(out.logits.float().view(-1, a.vocab), y.view(-1))
            loss = loss + a.aux * out.aux_loss
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
    dh = a.d // a.heads
    attn = a.d * a.d * 2 + 2 * a.d * a.kv_heads * dh
    active = 2 * a.vocab * a.d + a.layers * (attn + a.d * a.experts + a.top_k * 3 * a.d * a.ffn)
    print(json.dumps({"impl": f"torch {torch.__version__} eager, transformers {tf.__version__}",
                      "step_ms": ms, "tokens_per_s": a.batch * a.seq / (ms * 1e-3),
                      "loss": loss.item(), "active_params": active,
                      "peak_gib": torch.cuda.max_memory_allocated() / 2**30}))


if __name__ == "__main__":
    main()
