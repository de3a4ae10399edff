#!/usr/bin/env python3
"""One step's GPU kernel time by kind, predicted against measured (issue
49: which kind of kernel the step simulation prices wrong on one model and
not another). Predicted: a loomc --timeline (the "predicted gpu" lane's
spans by op). Measured: bench/kernel_times.cpp's CSV (CUPTI, every kernel
of a run) divided by the run's steps, NCCL's kernels left out.
  bench/kernel_split.py predict TIMELINE.json          -> JSON of ms by kind
  bench/kernel_split.py compare PRED.json KT.csv STEPS -> a table"""
import csv
import json
import sys

KINDS = ("products", "attention", "adam", "casts", "the rest")


def predicted_kind(op):
    if op == "matmul":
        return "products"
    if op.startswith("attention"):
        return "attention"
    if op == "adam":
        return "adam"
    if op == "cast":
        return "casts"
    return "the rest"


def measured_kind(name):
    n = name.lower()
    if "nccl" in n:
        return None
    if any(k in n for k in ("nvjet", "gemm", "cutlass", "xmma", "sm90_")):
        return "products"
    if "flash" in n or "attention" in n:
        return "attention"
    if "adam" in n:
        return "adam"
    if "castword" in n or "castkernel" in n:
        return "casts"
    return "the rest"


def predict(path):
    d = json.load(open(path))
    lanes = {e["tid"]: e["args"]["name"] for e in d["traceEvents"]
             if e.get("ph") == "M" and "tid" in e}
    out = {k: 0.0 for k in KINDS}
    for e in d["traceEvents"]:
        if e.get("ph") == "X" and lanes.get(e.get("tid")) == "predicted gpu":
            out[predicted_kind(e["name"])] += e["dur"] / 1e3
    out["step_ms"] = d["loom_prediction"]["step_s"] * 1e3
    return out


def compare(pred_path, csv_path, steps):
    pred = json.load(open(pred_path))
    meas = {k: 0.0 for k in KINDS}
    for name, calls, ns in csv.reader(open(csv_path)):
        k = measured_kind(name)
        if k:
            meas[k] += int(ns) / 1e6 / steps
    print("| kind | predicted ms | measured ms | predicted / measured |")
    print("|---|---|---|---|")
    for k in KINDS + ("all",):
        p = sum(pred[x] for x in KINDS) if k == "all" else pred[k]
        m = sum(meas.values()) if k == "all" else meas[k]
        print(f"| {k} | {p:.1f} | {m:.1f} | {p / m if m else float('nan'):.3f} |")


if __name__ == "__main__":
    if sys.argv[1] == "predict":
        print(json.dumps(predict(sys.argv[2])))
    else:
        compare(sys.argv[2], sys.argv[3], float(sys.argv[4]))
