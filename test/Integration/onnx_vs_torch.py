#!/usr/bin/env python3
"""An MLP exported from PyTorch to ONNX, imported by loomc, differentiated by
loom-autodiff and run by loom-run: loss and every gradient against the same
PyTorch model's autograd in float64 (relative error <= 1e-4).
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import parse_args, read_st, rel, tool, write_st  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.fc2(F.gelu(self.fc1(x)))))


def main():
    a = parse_args()
    torch.manual_seed(4)
    model = MLP()
    x = torch.randn(4, 8)
    y = torch.randint(0, 3, (4,))
    onnx_path = os.path.join(a.tmp, "mlp.onnx")
    torch.onnx.export(model, (x,), onnx_path, input_names=["x"], output_names=["logits"],
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    mlir = os.path.join(a.tmp, "mlp.mlir")
    tool(a.bin, "loomc", onnx_path, "--compile-to=autodiff", "-o", mlir)
    fin, fout = os.path.join(a.tmp, "in.safetensors"), os.path.join(a.tmp, "out.safetensors")
    write_st(fin, {"arg0": x, "arg1": y})
    tool(a.bin, "loom-run", mlir, "--function=forward_backward", f"--inputs={fin}",
         f"--outputs={fout}")
    out = read_st(fout)
    ref = model.double()
    loss = F.cross_entropy(ref(x.double()), y)
    loss.backward()
    errs = {"loss": rel(out["out0"].double(), loss.detach())}
    for name, p in ref.named_parameters():
        errs[name] = rel(out[f"grad.{name}"].double(), p.grad)
    worst = max(errs.values())
    print(f"onnx mlp  loss {loss.item():.6f}  {len(errs) - 1} gradients  "
          f"max rel error {worst:.2e} (bound 1e-4)")
    if worst > 1e-4:
        sys.exit(1)


if __name__ == "__main__":
    main()
