#!/usr/bin/env python3
"""Models that are not language models, end to end through the training
binary: an MLP classifier and a two-layer GCN (normalised adjacency as an
input, node classification) exported from PyTorch to ONNX, compiled by
`loomc model.onnx -o train`, and trained 12 steps from .npy files
(`--input NAME=FILE.npy` per input of the model); PyTorch trains the same
model from the same weights with torch.optim.AdamW on the same rows: step s
reads rows (s*B + r) mod N of every file. The MLP's 20 rows in batches of 4
wrap around the file; the GCN's batch is its whole graph (N = B = 5), every
step the same.

Bound: every step's loss within 1e-4 relative of the float32 reference (the
float64 distance is printed too). Also: bad data files are refused with a
message naming the input, and --sample random trains on drawn rows.
"""
import copy
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Import", "Inputs"))
from loomtest import run_binary, compare_losses, parse_args, tool  # noqa: E402
from make_onnx import GCN, MLP, normalised_adjacency  # noqa: E402

STEPS, LR, WD = 12, 1e-2, 0.01


def torch_losses(model, arrays, batch, dtype):
    model = model.to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=WD, foreach=False)
    n = len(arrays[0])
    losses = []
    for s in range(STEPS):
        rows = [(s * batch + r) % n for r in range(batch)]
        xs = [torch.from_numpy(a[rows]) for a in arrays]
        xs = [x.to(dtype) if x.is_floating_point() else x.long() for x in xs]
        opt.zero_grad()
        loss = F.cross_entropy(model(*xs[:-1]), xs[-1])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run(train, files, log, *flags, check=True):
    if os.path.exists(log):
        os.remove(log)
    args = [train, "--log-json", log, "--steps", str(STEPS), *flags]
    for name, path in files.items():
        args += ["--input", f"{name}={path}"]
    return run_binary(args, check)


def main():
    a = parse_args()
    import json
    rng = np.random.default_rng(5)
    torch.manual_seed(4)
    adj = normalised_adjacency(5).numpy()
    cases = {
        # name: model, example inputs for the export, the arrays (inputs
        # then labels), the ONNX input names, the batch
        "mlp": (MLP(), (torch.zeros(4, 8),),
                [rng.standard_normal((20, 8)).astype(np.float32), rng.integers(0, 3, 20)],
                ["x"], 4),
        "gcn": (GCN(), (torch.from_numpy(adj), torch.zeros(5, 6)),
                [adj.astype(np.float32), rng.standard_normal((5, 6)).astype(np.float32),
                 rng.integers(0, 3, 5).astype(np.int32)],
                ["adj", "x"], 5),
    }
    worst = 0.0
    for name, (model, example, arrays, names, batch) in cases.items():
        onnx_path = os.path.join(a.tmp, f"{name}.onnx")
        torch.onnx.export(copy.deepcopy(model), example, onnx_path, input_names=names,
                          output_names=["logits"], opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        train = os.path.join(a.tmp, f"{name}-train")
        tool(a.bin, "loomc", onnx_path, "--task=classify", f"--lr={LR}", f"--weight-decay={WD}",
             "-o", train)
        files = {}
        for n, arr in zip(names + ["labels"], arrays):
            files[n] = os.path.join(a.tmp, f"{name}.{n}.npy")
            np.save(files[n], arr)
        log = train + ".log.json"
        run(train, files, log)
        ours = [json.loads(line)["loss"] for line in open(log)]
        ref32 = torch_losses(copy.deepcopy(model), arrays, batch, torch.float32)
        ref64 = torch_losses(copy.deepcopy(model), arrays, batch, torch.float64)
        worst = max(worst, compare_losses(name, ours, ref32, ref64, STEPS))
        if name == "mlp":
            drawn = run(train, files, log, "--sample", "random")
            print(f"{name:6} --sample random: {len(open(log).readlines())} steps, "
                  f"{'samples/s' in drawn.stdout and 'ok' or 'no throughput line'}")
            # Bad data: a label outside the classes, a wrong row shape, a
            # missing input, rows that disagree.
            bad = dict(files)
            bad["labels"] = os.path.join(a.tmp, "bad-labels.npy")
            np.save(bad["labels"], np.array([0, 1, 7] + [0] * 17))
            print(run(train, bad, log, check=False).stderr.strip())
            bad = dict(files)
            bad["x"] = os.path.join(a.tmp, "bad-x.npy")
            np.save(bad["x"], np.zeros((20, 9), np.float32))
            print(run(train, bad, log, check=False).stderr.strip())
            bad = dict(files)
            bad["labels"] = os.path.join(a.tmp, "short-labels.npy")
            np.save(bad["labels"], np.zeros(19, np.int64))
            print(run(train, bad, log, check=False).stderr.strip())
            bad = {"x": files["x"]}
            print(run(train, bad, log, check=False).stderr.strip())
    print(f"worst relative error {worst:.1e} (bound 1e-4)")
    if worst > 1e-4:
        sys.exit(1)


if __name__ == "__main__":
    main()
