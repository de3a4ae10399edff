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
import torch.nn.functional as F


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


class Resize(nn.Module):
    """Upsampling (ONNX Resize), which the importer does not take."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(F.interpolate(x.unsqueeze(1), scale_factor=2.0).squeeze(1))


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 8))

    def forward(self, x):
        return x @ self.w.t()


class GPT(nn.Module):
    """nanoGPT's GPT-2 at toy size (the shapes of the loomc gpt generator)."""

    def __init__(self, layers=2, d=16, heads=2, vocab=50, seq=8, tril_in_forward=False):
        super().__init__()
        self.heads = heads
        self.tril_in_forward = tril_in_forward  # exports Trilu instead of a buffer
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.ln_1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.c_attn = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.c_proj = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.ln_2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.c_fc = nn.ModuleList(nn.Linear(d, 4 * d) for _ in range(layers))
        self.mlp_proj = nn.ModuleList(nn.Linear(4 * d, d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, idx):
        b, t = idx.shape
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for i in range(len(self.ln_1)):
            q, k, v = self.c_attn[i](self.ln_1[i](x)).split(x.shape[-1], dim=2)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / (q.shape[-1] ** 0.5))
            mask = (torch.tril(torch.ones(t, t, device=idx.device)) > 0
                    if self.tril_in_forward else self.mask[:t, :t])
            att = att.masked_fill(~mask, float("-inf"))
            y = torch.softmax(att, dim=-1) @ v
            x = x + self.c_proj[i](y.transpose(1, 2).reshape(b, t, -1))
            x = x + self.mlp_proj[i](F.gelu(self.c_fc[i](self.ln_2[i](x)), approximate="tanh"))
        return self.ln_f(x) @ self.wte.weight.t()


class Llama(nn.Module):
    """A toy Llama: RMSNorm, rotary embeddings (rotate-half), SwiGLU, no
    biases, untied head."""

    def __init__(self, layers=2, d=16, heads=2, vocab=50, seq=8, ffn=24):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.embed = nn.Embedding(vocab, d)
        self.norm1 = nn.ParameterList(nn.Parameter(torch.ones(d)) for _ in range(layers))
        self.q = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
        self.k = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
        self.v = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
        self.o = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
        self.norm2 = nn.ParameterList(nn.Parameter(torch.ones(d)) for _ in range(layers))
        self.gate = nn.ModuleList(nn.Linear(d, ffn, bias=False) for _ in range(layers))
        self.up = nn.ModuleList(nn.Linear(d, ffn, bias=False) for _ in range(layers))
        self.down = nn.ModuleList(nn.Linear(ffn, d, bias=False) for _ in range(layers))
        self.norm = nn.Parameter(torch.ones(d))
        self.head = nn.Linear(d, vocab, bias=False)
        freq = 10000.0 ** (-torch.arange(0, self.dh, 2).float() / self.dh)
        ang = torch.arange(seq).float()[:, None] * freq[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())
        self.causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def rope(self, x, t):
        x1, x2 = x[..., : self.dh // 2], x[..., self.dh // 2:]
        return x * self.cos[:t] + torch.cat([-x2, x1], dim=-1) * self.sin[:t]

    def forward(self, idx):
        b, t = idx.shape
        x = self.embed(idx)
        for i in range(len(self.q)):
            h = self.rms(x, self.norm1[i])
            q, k, v = (m[i](h).view(b, t, self.heads, self.dh).transpose(1, 2)
                       for m in (self.q, self.k, self.v))
            q, k = self.rope(q, t), self.rope(k, t)
            att = (q @ k.transpose(-2, -1)) / (self.dh ** 0.5)
            att = att.masked_fill(~self.causal[:t, :t], float("-inf"))
            y = (torch.softmax(att, -1) @ v).transpose(1, 2).reshape(b, t, -1)
            x = x + self.o[i](y)
            h2 = self.rms(x, self.norm2[i])
            x = x + self.down[i](F.silu(self.gate[i](h2)) * self.up[i](h2))
        return self.head(self.rms(x, self.norm))


class GCN(nn.Module):
    """Two graph-convolution layers with a dense normalised adjacency given as
    an input: logits = A relu(A X W1) W2 (Kipf & Welling)."""

    def __init__(self, features=6, hidden=8, classes=3):
        super().__init__()
        self.w1 = nn.Linear(features, hidden)
        self.w2 = nn.Linear(hidden, classes)

    def forward(self, adj, x):
        return adj @ self.w2(torch.relu(adj @ self.w1(x)))


class Gathers(nn.Module):
    """Gathers on axes other than 0 (BLOOM's and Persimmon's fused QKV
    split): a constant scalar index (a strided slice), constant indices out
    of order, indices given as an input (rows of the moved axis) and two
    index tensors together (offsets computed on the device)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.out = nn.Linear(8, 24), nn.Linear(34, 3)

    def forward(self, x, ids, rows):
        h = self.fc1(x).view(4, 2, 3, 4)
        a = h[:, :, 1, :]
        b = h.index_select(2, torch.tensor([2, 0]))
        c = h[0].index_select(2, ids)
        # Two index tensors: the exporter computes flat offsets, a Gather.
        d = h.view(4, 6, 4)[rows, ids]
        return self.out(torch.cat([a.flatten(1), b.flatten(1), c.flatten().view(4, 6), d], 1))


class Convs(nn.Module):
    """A small CNN (ResNet-style pieces): a strided, padded 2-d convolution,
    max pooling, a grouped dilated convolution, average pooling without
    the padding counted, batch norm (eval mode: running statistics) and a
    global average pool."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, groups=2, dilation=2, padding=2, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.out = nn.Linear(4 + 4 * 4 * 4, 3)
        with torch.no_grad():  # running statistics that are not the identity
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        h = F.max_pool2d(torch.relu(self.c1(x)), 3, stride=2, padding=1)
        # The norm after a ReLU: after a convolution an eval-mode export folds
        # it into the convolution's weights.
        h = F.avg_pool2d(self.bn(torch.relu(self.c2(h))), 2, stride=1, padding=1,
                         count_include_pad=False)
        g = F.adaptive_avg_pool2d(h, 1).flatten(1)
        return self.out(torch.cat([g, h[:, :, :4, :4].flatten(1)], 1))


class DepthwiseConv1d(nn.Module):
    """Mamba's causal depthwise convolution: padding k-1, the first T outputs."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3, groups=4, padding=2)
        self.out = nn.Linear(40, 3)

    def forward(self, x):
        return self.out(self.conv(x)[..., :10].flatten(1))


class DropoutMLP(nn.Module):
    """An MLP with nn.Dropout(0.1): a training-mode export keeps the node
    (ratio 0.1, training_mode true)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.drop = nn.Linear(8, 16), nn.Linear(16, 3), nn.Dropout(0.1)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def export_dropout(out):
    torch.manual_seed(0)
    export(DropoutMLP(), (torch.randn(4, 8),), os.path.join(out, "dropout.onnx"),
           (["x"], ["logits"]))


def normalised_adjacency(n=5):
    a = (torch.rand(n, n) > 0.5).float()
    a = ((a + a.t()) > 0).float() + torch.eye(n)
    d = a.sum(1).rsqrt()
    return d[:, None] * a * d[None, :]


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
    # Not supported: upsampling (Resize); a dynamic batch dimension.
    export(Resize(), (torch.randn(4, 8),), os.path.join(out, "resize.onnx"), (["x"], ["logits"]))
    torch.onnx.export(MLP(), (torch.randn(4, 8),), os.path.join(out, "dynamic.onnx"),
                      input_names=["x"], output_names=["logits"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}})
    # Eval mode folds the transpose into an anonymous initializer.
    t = Transposed()
    t.eval()
    torch.onnx.export(t, (torch.randn(4, 8),), os.path.join(out, "folded.onnx"),
                      input_names=["x"], output_names=["logits"], opset_version=17)
    export(GPT(), (torch.randint(0, 50, (2, 8)),), os.path.join(out, "gpt.onnx"),
           (["tokens"], ["logits"]))
    export(Llama(), (torch.randint(0, 50, (2, 8)),), os.path.join(out, "llama.onnx"),
           (["tokens"], ["logits"]))
    export(GCN(), (normalised_adjacency(), torch.randn(5, 6)), os.path.join(out, "gcn.onnx"),
           (["adj", "x"], ["logits"]))
    export_dropout(out)
    print("wrote the test models to", out)


if __name__ == "__main__":
    main()
