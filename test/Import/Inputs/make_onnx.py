#!/usr/bin/env python3
"""Exports the small PyTorch models the ONNX importer's tests read.

    /usr/bin/python3 test/Import/Inputs/make_onnx.py test/Import/Inputs

Training-mode export with constant folding off keeps every parameter a named
initializer (eval-mode exports merge equal initializers and fold weight
transposes, silently tying parameters PyTorch trains apart; see
docs/onnx.md). The files are checked in so the tests need no export step;
rerun this script after changing the models.
"""
import os
import sys

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        return self.out(h)


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(self.ln(x))


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 8))

    def forward(self, x):
        return x @ self.w.t()


def export(model, args, path, names):
    torch.onnx.export(model, args, path, input_names=names[0], output_names=names[1],
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)
    torch.manual_seed(0)
    export(MLP(), (torch.randn(4, 8),), os.path.join(out, "mlp.onnx"), (["x"], ["logits"]))
    # Eval mode with folding: what the importer must still handle sensibly.
    m = MLP()
    m.eval()
    torch.onnx.export(m, (torch.randn(4, 8),), os.path.join(out, "mlp_eval.onnx"),
                      input_names=["x"], output_names=["logits"], opset_version=17)
    # Not supported yet: LayerNormalization; a dynamic batch dimension.
    export(Norm(), (torch.randn(4, 8),), os.path.join(out, "layernorm.onnx"), (["x"], ["logits"]))
    torch.onnx.export(MLP(), (torch.randn(4, 8),), os.path.join(out, "dynamic.onnx"),
                      input_names=["x"], output_names=["logits"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}})
    # Eval mode folds the transpose into an anonymous initializer.
    t = Transposed()
    t.eval()
    torch.onnx.export(t, (torch.randn(4, 8),), os.path.join(out, "folded.onnx"),
                      input_names=["x"], output_names=["logits"], opset_version=17)
    print("wrote the test models to", out)


main()
