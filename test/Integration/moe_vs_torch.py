#!/usr/bin/env python3
"""The mixture-of-experts generator (`loomc --model moe:...`, Mixtral-style
blocks) against an independent PyTorch implementation written the way
Hugging Face's MixtralSparseMoeBlock and load_balancing_loss_func are:
softmax router, top-k, renormalised gates, a loop over experts with
index_add_, and the load-balancing loss E * sum(tokens_per_expert *
router_prob_per_expert) over every layer's routing, scaled by `aux`. Where a
capacity is given, the reference drops choices GShard's way (every token's
first choice before any second choice, tokens in order, at most C a
expert) with a loop of its own.

The shared expert (shared=W: Qwen2-MoE's, scaled by a sigmoid gate) and
the router z-loss (z=C: ST-MoE's mean of logsumexp(logits)^2) are written
the way Qwen2MoeSparseMoeBlock and router_z_loss_func are.

Checked, for a dropless model and one whose capacity drops tokens, and one
with a shared expert and the z-loss:
  - the loss and every gradient of @forward_backward (loom-run, fp32)
    against autograd in float64: relative L2 error <= 1e-5 per tensor;
  - 10 AdamW steps of @train_step against torch.optim.AdamW from the same
    parameters (train_vs_torch's reference loop): every loss within 1e-5
    relative of the float64 reference.
The routing is discontinuous: a float32 run and a float64 reference agree
only while no two router probabilities of a token are within rounding of
each other, which the seeds here satisfy (a flip would show as an error far
above the bound, not as a small drift).
"""
import math
import os
import re
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import (llama, model_inputs, parse_args, read_st, rel, spec_config,  # noqa: E402
                      tool, write_st)
from train_vs_torch import LR, STEPS, reference  # noqa: E402

BASE = "layers=2,d_model=16,heads=2,vocab=50,seq=8,batch=2,ffn=24,experts=8,top_k=2"
CASES = [("dropless", BASE + ",aux=0.01"),
         ("capacity 1.0", BASE + ",capacity=1.0,aux=0.01"),
         ("top-1, no aux", BASE.replace("top_k=2", "top_k=1") + ",norm_topk=0,aux=0"),
         ("shared, z-loss", BASE + ",capacity=1.0,aux=0.01,shared=20,z=0.01")]
DROPPED = [0]  # choices the reference dropped in the last forward


def reals(keys):
    """(config of integer keys and the z-loss's coefficient "z", capacity
    factor, aux coefficient)."""
    ints, cap, aux, z = [], 0.0, 0.001, 0.0
    for kv in keys.split(","):
        k, v = kv.split("=")
        if k == "capacity":
            cap = float(v)
        elif k == "aux":
            aux = float(v)
        elif k == "z":
            z = float(v)
        else:
            ints.append(kv)
    cfg = spec_config(",".join(ints))
    cfg["z"] = z
    return cfg, cap, aux


def choice_slots(idx, experts, capacity):
    """keep[t, j]: whether token t's j-th choice found room (GShard order)."""
    n, k = idx.shape
    keep = torch.zeros(n, k, dtype=torch.bool)
    used = [0] * experts
    for j in range(k):
        for t in range(n):
            e = int(idx[t, j])
            keep[t, j] = used[e] < capacity
            used[e] += 1
    return keep


def moe_block(p, i, h, cfg, cap):
    """Hugging Face's MixtralSparseMoeBlock on h [N, D]; returns (out, logits)."""
    E, K = cfg["experts"], cfg["top_k"]
    g = lambda n: p[f"model.layers.{i}.block_sparse_moe.{n}"]
    logits = h @ g("gate.weight").T
    probs = F.softmax(logits, dim=-1)
    gates, idx = torch.topk(probs, K, dim=-1)
    if cfg.get("norm_topk", 1):
        gates = gates / gates.sum(dim=-1, keepdim=True)
    n = h.shape[0]
    capacity = n if cap == 0 else min(n, max(1, math.ceil(cap * n * K / E)))
    keep = choice_slots(idx, E, capacity)
    DROPPED[0] += int((~keep).sum())
    out = torch.zeros_like(h)
    for e in range(E):
        tok, j = torch.where((idx == e) & keep)
        if tok.numel() == 0:
            continue
        x = h[tok]
        y = (F.silu(x @ g(f"experts.{e}.w1.weight").T) * (x @ g(f"experts.{e}.w3.weight").T)) \
            @ g(f"experts.{e}.w2.weight").T
        out = out.index_add(0, tok, y * gates[tok, j, None])
    if cfg.get("shared", 0):
        # Qwen2MoeSparseMoeBlock's shared expert: a SwiGLU MLP every token
        # goes through, scaled by sigmoid(shared_expert_gate(h)).
        y = (F.silu(h @ g("shared_expert.gate_proj.weight").T) *
             (h @ g("shared_expert.up_proj.weight").T)) @ g("shared_expert.down_proj.weight").T
        out = out + torch.sigmoid(h @ g("shared_expert_gate.weight").T) * y
    return out, logits


def load_balancing_loss(all_logits, E, K):
    """Hugging Face's load_balancing_loss_func (no attention mask)."""
    routing = F.softmax(torch.cat(all_logits, dim=0), dim=-1)
    _, selected = torch.topk(routing, K, dim=-1)
    mask = F.one_hot(selected, E).to(routing.dtype)
    tokens_per_expert = mask.mean(dim=0)
    router_prob_per_expert = routing.mean(dim=0)
    return (tokens_per_expert * router_prob_per_expert.unsqueeze(0)).sum() * E


def mixtral(p, tok, tgt, cfg, cap, aux):
    """Llama blocks (loomtest.llama) whose MLPs are moe_block, plus the
    load-balancing loss."""
    router_logits = []

    def ffn(i, h):
        B, T, D = h.shape
        out, logits = moe_block(p, i, h.reshape(B * T, D), cfg, cap)
        router_logits.append(logits)
        return out.reshape(B, T, D)

    loss = llama(p, tok, tgt, cfg, ffn)
    if aux > 0:
        loss = loss + aux * load_balancing_loss(router_logits, cfg["experts"], cfg["top_k"])
    if cfg.get("z", 0) > 0:
        # ST-MoE's router z-loss (Hugging Face's router_z_loss_func): the
        # mean over every layer's tokens of logsumexp(logits)^2.
        loss = loss + cfg["z"] * (torch.logsumexp(torch.cat(router_logits), -1) ** 2).mean()
    return loss


def main():
    a = parse_args()
    torch.manual_seed(0)
    worst = 0.0
    for case, (label, keys) in enumerate(CASES):
        cfg, cap, aux = reals(keys)
        inputs = model_inputs("llama", cfg)
        fin = os.path.join(a.tmp, f"moe{case}.in.safetensors")
        write_st(fin, inputs)

        # The loss and every gradient of one step.
        mlir = os.path.join(a.tmp, f"moe{case}.grad.mlir")
        tool(a.bin, "loomc", "--model", f"moe:{keys}", "--compile-to=autodiff", "-o", mlir)
        fpar, fout = (os.path.join(a.tmp, f"moe{case}.{n}.safetensors") for n in ("params", "out"))
        tool(a.bin, "loom-run", mlir, "--function=forward_backward", f"--inputs={fin}",
             "--seed=7", f"--dump-params={fpar}", f"--outputs={fout}")
        params = read_st(fpar)
        p64 = {k: v.double().requires_grad_() for k, v in params.items()}
        out = read_st(fout)
        DROPPED[0] = 0
        loss = mixtral(p64, inputs["arg0"], inputs["arg1"], cfg, cap, aux)
        # The capacity case must drop choices, or it tests nothing dropless did not.
        if (cap > 0) != (DROPPED[0] > 0):
            sys.exit(f"{label}: the reference dropped {DROPPED[0]} choices")
        loss.backward()
        errs = {"loss": rel(out["out0"].double(), loss.detach())}
        for name, prm in p64.items():
            # (An expert no token reached has no gradient in torch; Loom's is zero.)
            ref = prm.grad if prm.grad is not None else torch.zeros_like(prm)
            errs[name] = rel(out[f"grad.{name}"].double(), ref)
        name, err = max(errs.items(), key=lambda kv: kv[1])
        if len(out) != len(params) + 1:
            sys.exit(f"{label}: loom-run returned {len(out)} tensors for {len(params)} parameters")
        print(f"moe {label:14} loss {loss.item():.6f}  {len(params)} gradients  "
              f"{DROPPED[0]} choices dropped  max rel error {err:.2e} ({name})")
        worst = max(worst, err)

        # Ten AdamW steps.
        mlir = os.path.join(a.tmp, f"moe{case}.train.mlir")
        tool(a.bin, "loomc", "--model", f"moe:{keys}", "--compile-to=optimizer",
             "--optimizer=adamw", f"--lr={LR}", "--weight-decay=0.01", "-o", mlir)
        run = tool(a.bin, "loom-run", mlir, "--function=train_step", f"--inputs={fin}",
                   "--seed=7", f"--steps={STEPS}", capture=True)
        ours = [float(m) for m in re.findall(r"out0 = (\S+)", run.stdout)]
        # An expert no token reached gets a zero gradient in Loom (its Adam
        # step still decays and moves it by momentum); PyTorch's optimizers
        # skip a parameter whose gradient is None, so the reference gives it
        # zeros.
        ref = reference(lambda p, tok, tgt, c: mixtral(p, tok, tgt, c, cap, aux), params,
                        inputs, "llama", cfg, torch.float64, missing_as_zero=True)
        err = max(abs(o - r) / abs(r) for o, r in zip(ours, ref))
        if len(ours) != STEPS:
            sys.exit(f"{label}: {len(ours)} losses from loom-run, expected {STEPS}")
        print(f"moe {label:14} {STEPS} steps: loss {ours[0]:.6f} -> {ours[-1]:.6f}  "
              f"max rel error {err:.2e}")
        worst = max(worst, err)
    print(f"worst relative error {worst:.2e} (bound 1e-5)")
    if worst > 1e-5:
        sys.exit(1)


if __name__ == "__main__":
    main()
