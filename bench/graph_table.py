#!/usr/bin/env python3
"""The table of bench/run-graph-gpu.sh: the karate programs' GPU losses
against the CPU backend's, then GraphSAGE step times of Loom (each feature
placement, beside loomc's prediction) and PyG. Loom's step time here is the
loop's wall time a step: the JSON log's step_ms plus data_wait_ms (the wait
for the sampler, which runs one step ahead), the same span PyG's is."""
import json
import os
import sys

out, cpu = sys.argv[1], sys.argv[2]
ref = {}
for line in open(cpu):
    name, rest = line.split(" ", 1)
    ref[name] = json.loads(rest)
print("| karate placement | max rel. error of 10 GPU losses vs CPU |")
print("|---|---|")
for p, losses in ref.items():
    path = os.path.join(out, f"karate-{p}.jsonl")
    if not os.path.exists(path):
        print(f"| {p} | no run |")
        continue
    gpu = [json.loads(l)["loss"] for l in open(path)]
    err = max(abs(a - b) / abs(b) for a, b in zip(gpu, losses)) if len(gpu) == len(losses) else None
    print(f"| {p} | {err:.1e} |" if err is not None else f"| {p} | {len(gpu)} steps |")

predicted = {}
pred = os.path.join(os.path.dirname(cpu), "predictions.json")
if os.path.exists(pred):
    predicted = json.load(open(pred))
print()
print("| run | step ms (wall) | of which waiting for samples | seeds/s | predicted GPU step ms | loss first -> last |")
print("|---|---|---|---|---|---|")
rows = {}
for p in ("device", "zero-copy", "host-gather"):
    path = os.path.join(out, f"loom-{p}.jsonl")
    if not os.path.exists(path):
        continue
    log = [json.loads(l) for l in open(path)][10:]  # after 10 warm-up steps
    if not log:
        continue
    step = sum(r["step_ms"] + r.get("data_wait_ms", 0) for r in log) / len(log)
    wait = sum(r.get("data_wait_ms", 0) for r in log) / len(log)
    rows[f"loom {p}"] = step
    print(f"| Loom, table {p} | {step:.2f} | {wait:.2f} | {1024 / step * 1e3:.0f} | "
          f"{predicted.get(p, float('nan')):.2f} | {log[0]['loss']:.3f} -> {log[-1]['loss']:.3f} |")
path = os.path.join(out, "pyg.jsonl")
if os.path.exists(path):
    for l in open(path):
        r = json.loads(l)
        name = f"pyg x on {r['features_on']}, {r['workers']} workers"
        rows[name] = r["step_ms"]
        what = ("PyG NeighborLoader" if r["peer"] == "pyg"
                else "PyG SAGEConv, torch CPU sampler")
        print(f"| {what}, x on {r['features_on']}, {r['workers']} workers | "
              f"{r['step_ms']:.2f} | | {r['seeds_per_s']:.0f} | | "
              f"{r['loss_first']:.3f} -> {r['loss_last']:.3f} (nodes/batch {r['nodes_per_batch']:.0f}) |")
if rows:
    print()
    base = min((v for k, v in rows.items() if k.startswith("pyg")), default=None)
    for k, v in rows.items():
        if k.startswith("loom") and base:
            print(f"{k}: {base / v:.2f}x the fastest PyG configuration")
