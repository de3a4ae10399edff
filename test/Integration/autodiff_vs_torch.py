#!/usr/bin/env python3
"""Whole-model gradients of loom-autodiff against PyTorch autograd.

For each built-in model: loomc builds the forward graph and differentiates
it (--compile-to=autodiff); loom-run executes @forward_backward in fp32 on
the CPU runtime with parameters drawn from the model's initialisers and
writes the loss and every gradient; this script loads the same parameters
into an independent PyTorch implementation of the model (loomtest.py),
computes the loss and its gradients with autograd in float64, and compares.

Tolerance: relative L2 error <= 1e-4 per tensor (the issue's bound for
float32 against a float64 reference; measured errors are printed).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import (LLAMA_GQA, MODELS, model_inputs, parse_args, read_st,  # noqa: E402
                      rel, spec_config, tool, write_st)


def main():
    a = parse_args()
    torch.manual_seed(0)
    worst = 0.0
    cases = [m + ([], m[0]) for m in MODELS] + \
        [("gpt", MODELS[1][1], MODELS[1][2], ["--recompute"], "gpt (recompute)"),
         LLAMA_GQA + ([], "llama (gqa)")]
    for case, (family, keys, ref, extra, label) in enumerate(cases):
        cfg = spec_config(keys)
        mlir = os.path.join(a.tmp, f"{family}{case}.mlir")
        tool(a.bin, "loomc", "--model", f"{family}:{keys}", "--compile-to=autodiff",
             "-o", mlir, *extra)
        inputs = model_inputs(family, cfg)
        fin, fpar, fout = (os.path.join(a.tmp, f"{family}.{n}.safetensors")
                           for n in ("in", "params", "out"))
        write_st(fin, inputs)
        tool(a.bin, "loom-run", mlir, "--function=forward_backward", f"--inputs={fin}",
             "--seed=7", f"--dump-params={fpar}", f"--outputs={fout}")
        params = {k: v.double().requires_grad_() for k, v in read_st(fpar).items()}
        out = read_st(fout)
        first = inputs["arg0"].double() if family == "mlp" else inputs["arg0"]
        loss = ref(params, first, inputs["arg1"], cfg)
        loss.backward()
        errs = {"loss": rel(out["out0"].double(), loss.detach())}
        for name, prm in params.items():
            errs[name] = rel(out[f"grad.{name}"].double(), prm.grad)
        name, err = max(errs.items(), key=lambda kv: kv[1])
        worst = max(worst, err)
        print(f"{label:16} loss {loss.item():.6f}  {len(params)} gradients  "
              f"max rel error {err:.2e} ({name})")
        if len(out) != len(params) + 1:
            sys.exit(f"{family}: loom-run returned {len(out)} tensors for {len(params)} parameters")
    print(f"worst relative error {worst:.2e} (bound 1e-4)")
    if worst > 1e-4:
        sys.exit(1)


if __name__ == "__main__":
    main()
