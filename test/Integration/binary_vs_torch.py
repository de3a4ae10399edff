#!/usr/bin/env python3
"""The user's path end to end: a GPT-2-style and a Llama-style model exported
from PyTorch to ONNX, compiled by `loomc model.onnx -o train` into a CPU
training binary that starts from the exported weights, and trained 20 steps
on a token file; PyTorch trains the same model from the same weights with
torch.optim.AdamW on the same data order (step s reads B*T+1 tokens at
offset (s*B*T) mod (N - B*T - 1)).

Bound: every step's loss within 1e-4 relative of the float32 reference (the
float64 distance is printed too). Also: 10 steps, checkpoint, resume for 10
more gives exactly the losses of 20 straight steps.

Mixed precision (`--precision=bf16`: bf16 activations and GEMM inputs, fp32
master weights and Adam state) is held to the same float32 reference within
1e-2 relative: bf16 keeps 8 significant bits (2^-9 = 2e-3 relative per
rounding), and 20 steps of training compound a few of those; a wrong cast or
a lost gradient shows up far above it (the loss would not follow torch's).
"""
import copy
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Import", "Inputs"))
from loomtest import binary_losses, compare_losses, parse_args, tool  # noqa: E402
from make_onnx import GPT, Llama  # noqa: E402

STEPS, LR, WD, B, T, VOCAB = 20, 1e-2, 0.01, 4, 8, 50


def batches(tokens, steps):
    n, bt = len(tokens), B * T
    for s in range(steps):
        off = (s * bt) % (n - bt - 1)
        chunk = torch.from_numpy(tokens[off:off + bt + 1].astype(np.int64))
        yield chunk[:-1].view(B, T), chunk[1:].view(B, T)


def torch_losses(model, tokens, dtype):
    model = model.to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=WD, foreach=False)
    losses = []
    for x, y in batches(tokens, STEPS):
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    a = parse_args()
    rng = np.random.default_rng(7)
    # Tokens with structure (a noisy repeating phrase), so the loss falls.
    phrase = rng.integers(0, VOCAB, 37)
    tokens = np.resize(phrase, 4000).astype(np.uint16)
    noise = rng.random(len(tokens)) < 0.1
    tokens[noise] = rng.integers(0, VOCAB, noise.sum())
    data = os.path.join(a.tmp, "tokens.bin")
    tokens.tofile(data)

    worst, worst16 = 0.0, 0.0
    # PyTorch buffers are initializers too: the Llama's rotary tables are
    # named frozen (the GPT's causal mask is boolean, a constant anyway).
    for name, cls, frozen in (("gpt", GPT, []), ("llama", Llama, ["--frozen=cos,sin"])):
        torch.manual_seed(3)
        model = cls(vocab=VOCAB, seq=T)
        onnx_path = os.path.join(a.tmp, f"{name}.onnx")
        torch.onnx.export(model, (torch.zeros(B, T, dtype=torch.int64),), onnx_path,
                          input_names=["tokens"], output_names=["logits"], opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
        train = os.path.join(a.tmp, f"{name}-train")
        tool(a.bin, "loomc", onnx_path, "--task=lm", f"--lr={LR}", f"--weight-decay={WD}",
             *frozen, "-o", train)
        ours = binary_losses(train, data, train + ".log.json", "--steps", str(STEPS))
        ref32 = torch_losses(copy.deepcopy(model), tokens, torch.float32)
        ref64 = torch_losses(copy.deepcopy(model), tokens, torch.float64)
        worst = max(worst, compare_losses(name, ours, ref32, ref64, STEPS))

        train16 = train + "-bf16"
        tool(a.bin, "loomc", onnx_path, "--task=lm", f"--lr={LR}", f"--weight-decay={WD}",
             "--precision=bf16", *frozen, "-o", train16)
        mixed = binary_losses(train16, data, train16 + ".log.json", "--steps", str(STEPS))
        worst16 = max(worst16, compare_losses(name + "/bf16", mixed, ref32, ref64, STEPS))

        # Resume: 10 + 10 steps equal 20 straight.
        ck = os.path.join(a.tmp, f"{name}-ck")
        first = binary_losses(train, data, train + ".log.json", "--steps", "10",
                              "--checkpoint-dir", ck, "--checkpoint-every", "10")
        second = binary_losses(train, data, train + ".log.json", "--steps", "10",
                               "--checkpoint-dir", ck, "--resume")
        same = first + second == ours
        print(f"{name:6} resume after 10 steps: {'identical' if same else 'DIFFERENT'} losses")
        if not same:
            sys.exit(f"{name}: resumed {first + second} != straight {ours}")
    print(f"worst relative error {worst:.1e} (bound 1e-4); "
          f"bf16 {worst16:.1e} (bound 1e-2)")
    if worst > 1e-4 or worst16 > 1e-2:
        sys.exit(1)


if __name__ == "__main__":
    main()
