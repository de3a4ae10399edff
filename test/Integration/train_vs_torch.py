#!/usr/bin/env python3
"""Training steps compiled by loomc (--compile-to=optimizer: forward,
loom-autodiff, loom-attach-optimizer with AdamW) and executed by loom-run in
fp32, against torch.optim.AdamW on an independent PyTorch implementation of
each model, from the same initial parameters on the same batch.

Reference in float32 and float64; bound: relative error of every step's loss
<= 1e-4 against the float32 reference (the end-to-end bound of the
training-binary acceptance, issue 6), with the float64 distance printed.
"""
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import (MODELS, compare_losses, model_inputs, parse_args,  # noqa: E402
                      read_st, spec_config, tool, write_st)

STEPS = 10
LR = 1e-2


def reference(ref, params, inputs, family, cfg, dtype, missing_as_zero=False):
    """`missing_as_zero`: a parameter the loss did not reach this step gets a
    zero gradient (Adam still decays and moves it by momentum) instead of
    being skipped."""
    p = {k: v.to(dtype).clone().requires_grad_() for k, v in params.items()}
    opt = torch.optim.AdamW(list(p.values()), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, foreach=False)
    first = inputs["arg0"].to(dtype) if family == "mlp" else inputs["arg0"]
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ref(p, first, inputs["arg1"], cfg)
        loss.backward()
        if missing_as_zero:
            for t in p.values():
                if t.grad is None:
                    t.grad = torch.zeros_like(t)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    a = parse_args()
    torch.manual_seed(2)
    worst = 0.0
    for family, keys, ref in MODELS:
        cfg = spec_config(keys)
        mlir = os.path.join(a.tmp, f"{family}.train.mlir")
        tool(a.bin, "loomc", "--model", f"{family}:{keys}", "--compile-to=optimizer",
             "--optimizer=adamw", f"--lr={LR}", "--weight-decay=0.01", "-o", mlir)
        inputs = model_inputs(family, cfg)
        fin = os.path.join(a.tmp, f"{family}.train.in.safetensors")
        fpar = os.path.join(a.tmp, f"{family}.train.params.safetensors")
        write_st(fin, inputs)
        run = tool(a.bin, "loom-run", mlir, "--function=train_step", f"--inputs={fin}",
                   "--seed=11", f"--dump-params={fpar}", f"--steps={STEPS}", capture=True)
        ours = [float(m) for m in re.findall(r"out0 = (\S+)", run.stdout)]
        params = read_st(fpar)
        ref32 = reference(ref, params, inputs, family, cfg, torch.float32)
        ref64 = reference(ref, params, inputs, family, cfg, torch.float64)
        worst = max(worst, compare_losses(family, ours, ref32, ref64, STEPS))
    print(f"worst relative error {worst:.1e} (bound 1e-4)")
    if worst > 1e-4:
        sys.exit(1)


if __name__ == "__main__":
    main()
