#!/usr/bin/env python3
"""The peer of Loom's graph models (issue 21): PyG's GraphSAGE trained as
its users train it, on the graph folder loom-graphgen wrote.

NeighborLoader samples fixed fan-outs around each batch of training nodes
on the CPU, gathers the sampled nodes' features from the CPU table into a
batch and the loop moves it to the GPU (the conventional CPU-gather-and-
copy path the GCN paper compares against); --features-on cuda keeps the
table on the GPU instead (PyG then indexes it there). The model is PyG's
SAGEConv (mean aggregation) with ReLU between layers and cross-entropy on
the seeds, AdamW, as loomc --model sage builds it.

Prints one JSON line per configuration: mean step time (sampling, gather,
copy, forward, backward and update: the loop's wall time) over --steps
after --warmup, the seeds a second, and the sampled nodes and edges a
batch (PyG's subgraph holds each node once; Loom's tree repeats a node
once per path that reaches it, so it gathers more rows for the same
fan-outs).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--fanout", default="15,10")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--workers", default="0,8")
    ap.add_argument("--features-on", default="cpu,cuda")
    a = ap.parse_args()
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import SAGEConv

    t0 = time.time()
    g = a.graph
    indptr = torch.from_numpy(np.load(os.path.join(g, "indptr.npy")))
    indices = torch.from_numpy(np.load(os.path.join(g, "indices.npy")).astype(np.int64))
    torch.set_num_threads(os.cpu_count())
    x = torch.from_numpy(np.load(os.path.join(g, "features.npy")))
    y = torch.from_numpy(np.load(os.path.join(g, "labels.npy")))
    train = torch.from_numpy(np.load(os.path.join(g, "train.npy")))
    n = len(indptr) - 1
    classes = int(y.max()) + 1
    # The CSR is symmetric, so its rows are the CSC's columns: edge_index
    # sorted by destination, as NeighborLoader's is_sorted expects.
    dst = torch.repeat_interleave(torch.arange(n), indptr[1:] - indptr[:-1])
    edge_index = torch.stack([indices, dst])
    del dst
    print(f"loaded {n} nodes, {edge_index.shape[1]} edges, x {tuple(x.shape)} in "
          f"{time.time() - t0:.1f} s", file=sys.stderr)
    fan = [int(f) for f in a.fanout.split(",")]

    class Sage(torch.nn.Module):
        def __init__(self, i, h, c, layers):
            super().__init__()
            dims = [i] + [h] * (layers - 1) + [c]
            self.convs = torch.nn.ModuleList(SAGEConv(dims[k], dims[k + 1], aggr="mean")
                                             for k in range(layers))

        def forward(self, x, edge_index):
            for k, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if k < len(self.convs) - 1:
                    x = F.relu(x)
            return x

    try:  # NeighborLoader's sampling needs pyg-lib or torch-sparse
        import torch_geometric.typing as pygt
        have_sampler = pygt.WITH_PYG_LIB or pygt.WITH_TORCH_SPARSE
    except Exception:
        have_sampler = False
    if not have_sampler:
        print("NeighborLoader cannot sample here (neither pyg-lib nor torch-sparse is "
              "installed): the same path with a torch sampler instead", file=sys.stderr)

    def torch_batches(where):
        """NeighborLoader's work without it: seeds shuffled each epoch, each
        hop's neighbours drawn uniformly with replacement (NeighborLoader's
        replace=True) by vectorised torch ops on the CPU, the subgraph's
        nodes deduplicated (torch.unique), their features gathered on the
        CPU (or on the GPU from a CUDA table), pinned and moved."""
        xs = x.to(where)
        while True:
            for seeds in train[torch.randperm(len(train))].split(a.batch):
                if len(seeds) < a.batch:
                    break
                frontier, src_all, dst_all = seeds, [], []
                for f in fan:
                    start = indptr[frontier]
                    deg = indptr[frontier + 1] - start
                    pick = (torch.rand(len(frontier), f) * deg[:, None]).long()
                    nbr = indices[(start[:, None] + pick).clamp_max(len(indices) - 1)]
                    keep = (deg > 0)[:, None].expand(-1, f)
                    src_all.append(nbr[keep])
                    dst_all.append(frontier[:, None].expand(-1, f)[keep])
                    frontier = torch.unique(src_all[-1])
                n_id, inv = torch.unique(torch.cat([seeds] + src_all + dst_all),
                                         return_inverse=True)
                nsrc = sum(len(t) for t in src_all)
                src = inv[len(seeds):len(seeds) + nsrc]
                dst = inv[len(seeds) + nsrc:]
                if where == "cpu":
                    xb = xs[n_id].pin_memory().to("cuda", non_blocking=True)
                else:
                    xb = xs[n_id.to("cuda")]
                yield (xb, torch.stack([src, dst]).to("cuda", non_blocking=True),
                       inv[:len(seeds)].to("cuda", non_blocking=True),
                       y[seeds].to("cuda", non_blocking=True), len(n_id), len(src))

    for where in a.features_on.split(","):
        for workers in [int(w) for w in a.workers.split(",")]:
            if where == "cuda" and workers:
                continue  # a CUDA table is not shared with worker processes
            if not have_sampler:
                if workers:
                    continue
                it = torch_batches(where)
                torch.manual_seed(0)
                model = Sage(x.shape[1], a.hidden, classes, len(fan)).cuda()
                opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, fused=True)
                times, nodes, edges, losses = [], [], [], []
                torch.cuda.synchronize()
                last = time.perf_counter()
                for step in range(a.warmup + a.steps):
                    xb, ei, seeds_local, yb, nn, ne = next(it)
                    opt.zero_grad(set_to_none=True)
                    out = model(xb, ei)[seeds_local]
                    loss = F.cross_entropy(out, yb)
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
                    now = time.perf_counter()
                    if step >= a.warmup:
                        times.append(now - last)
                        nodes.append(nn)
                        edges.append(ne)
                    last = now
                ms = 1e3 * float(np.mean(times))
                print(json.dumps({"peer": "pyg-sageconv+torch-sampler", "features_on": where,
                                  "workers": 0, "step_ms": ms, "seeds_per_s": a.batch / ms * 1e3,
                                  "nodes_per_batch": float(np.mean(nodes)),
                                  "edges_per_batch": float(np.mean(edges)),
                                  "loss_first": losses[0], "loss_last": losses[-1]}), flush=True)
                continue
            data = Data(x=x.to(where), edge_index=edge_index, y=y)
            data.num_nodes = n
            loader = NeighborLoader(data, num_neighbors=fan, batch_size=a.batch,
                                    input_nodes=train, shuffle=True, is_sorted=True,
                                    num_workers=workers, persistent_workers=workers > 0,
                                    pin_memory=where == "cpu")
            torch.manual_seed(0)
            model = Sage(x.shape[1], a.hidden, classes, len(fan)).cuda()
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, fused=True)
            times, nodes, edges, losses = [], [], [], []
            it = iter(loader)
            torch.cuda.synchronize()
            last = time.perf_counter()
            for step in range(a.warmup + a.steps):
                try:
                    batch = next(it)
                except StopIteration:
                    it = iter(loader)
                    batch = next(it)
                batch = batch.to("cuda", non_blocking=True)
                opt.zero_grad(set_to_none=True)
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                opt.step()
                losses.append(loss.item())  # synchronises, as Loom's log does
                now = time.perf_counter()
                if step >= a.warmup:
                    times.append(now - last)
                    nodes.append(batch.num_nodes)
                    edges.append(batch.edge_index.shape[1])
                last = now
            ms = 1e3 * float(np.mean(times))
            print(json.dumps({"peer": "pyg", "features_on": where, "workers": workers,
                              "step_ms": ms, "seeds_per_s": a.batch / ms * 1e3,
                              "nodes_per_batch": float(np.mean(nodes)),
                              "edges_per_batch": float(np.mean(edges)),
                              "loss_first": losses[0], "loss_last": losses[-1]}), flush=True)
            del loader


if __name__ == "__main__":
    main()
