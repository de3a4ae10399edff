#!/usr/bin/env python3
"""Models exported from PyTorch to ONNX (training mode, no constant folding),
imported by loomc, differentiated by loom-autodiff and run by loom-run: loss
and every gradient against the same PyTorch model's autograd in float64
(relative error <= 1e-4). An MLP (classifier), a GPT-2-style decoder (tied
embedding, causal mask, tanh GELU), a Llama-style one (RMSNorm, rotary
embeddings, SwiGLU) and a two-layer GCN (dense normalised adjacency as an
input, node classification).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Import", "Inputs"))
from loomtest import parse_args, read_st, rel, tool, write_st  # noqa: E402
from make_onnx import (GCN, GPT, MLP, Convs, DepthwiseConv1d, Gathers, Llama,  # noqa: E402
                       normalised_adjacency)


def check(a, name, model, xs, y, mode=torch.onnx.TrainingMode.TRAINING):
    onnx_path = os.path.join(a.tmp, f"{name}.onnx")
    model.train(mode == torch.onnx.TrainingMode.TRAINING)
    torch.onnx.export(model, tuple(xs), onnx_path,
                      input_names=[f"in{i}" for i in range(len(xs))], output_names=["logits"],
                      opset_version=17, training=mode, do_constant_folding=False)
    mlir = os.path.join(a.tmp, f"{name}.mlir")
    tool(a.bin, "loomc", onnx_path, "--compile-to=autodiff", "-o", mlir)
    fin = os.path.join(a.tmp, f"{name}.in.safetensors")
    fout = os.path.join(a.tmp, f"{name}.out.safetensors")
    inputs = {f"arg{i}": x for i, x in enumerate(xs)}
    inputs[f"arg{len(xs)}"] = y
    write_st(fin, inputs)
    tool(a.bin, "loom-run", mlir, "--function=forward_backward", f"--inputs={fin}",
         f"--outputs={fout}")
    out = read_st(fout)
    ref = model.double()
    logits = ref(*(x.double() if x.is_floating_point() else x for x in xs))
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    errs = {"loss": rel(out["out0"].double(), loss.detach())}
    for pname, p in ref.named_parameters():
        errs[pname] = rel(out[f"grad.{pname}"].double(), p.grad)
    worst = max(errs.values())
    print(f"onnx {name:7} loss {loss.item():.6f}  {len(errs) - 1} gradients  "
          f"max rel error {worst:.2e} (bound 1e-4)")
    return worst


def main():
    a = parse_args()
    torch.manual_seed(4)
    worst = check(a, "mlp", MLP(), [torch.randn(4, 8)], torch.randint(0, 3, (4,)))
    tok = torch.randint(0, 50, (2, 8))
    worst = max(worst, check(a, "gpt", GPT(), [tok], torch.randint(0, 50, (2, 8))))
    worst = max(worst, check(a, "gpt-tril", GPT(tril_in_forward=True), [tok],
                             torch.randint(0, 50, (2, 8))))
    worst = max(worst, check(a, "llama", Llama(), [tok], torch.randint(0, 50, (2, 8))))
    worst = max(worst, check(a, "gcn", GCN(), [normalised_adjacency(), torch.randn(5, 6)],
                             torch.randint(0, 3, (5,))))
    worst = max(worst, check(a, "gathers", Gathers(), [torch.randn(4, 8),
                                                      torch.tensor([3, 1, 1, 0]),
                                                      torch.tensor([2, 0, 3, 2])],
                             torch.randint(0, 3, (4,))))
    # Batch norm in eval mode: the file holds the running statistics.
    worst = max(worst, check(a, "convs", Convs(), [torch.randn(2, 3, 9, 9)],
                             torch.randint(0, 3, (2,)), torch.onnx.TrainingMode.EVAL))
    worst = max(worst, check(a, "conv1d", DepthwiseConv1d(), [torch.randn(2, 4, 10)],
                             torch.randint(0, 3, (2,))))
    if worst > 1e-4:
        sys.exit(1)


if __name__ == "__main__":
    main()
