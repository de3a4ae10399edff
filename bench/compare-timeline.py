#!/usr/bin/env python3
"""Predicted against measured: the phases of `loomc --timeline` (the cost
model's step) beside those of a binary's `--trace` (median over its steps),
and, when the step updates on the CPU, when those updates start and how long
they take together.

    python3 bench/compare-timeline.py predicted.json measured.json
"""
import json
import statistics
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    pred = json.load(open(sys.argv[1]))
    meas = json.load(open(sys.argv[2]))
    p = pred.get("loom_prediction")
    if not p:
        sys.exit(f"{sys.argv[1]}: not a loomc --timeline file (no loom_prediction)")
    spans = [e for e in meas.get("traceEvents", []) if e.get("ph") == "X"]
    if not spans:
        sys.exit(f"{sys.argv[2]}: no spans (write it with the binary's --trace)")
    # Trace times are microseconds; skip the first step (allocations).
    def med(name):
        d = [e["dur"] / 1e6 for e in spans if e["name"] == name][1:]
        return statistics.median(d) if d else float("nan")
    rows = [("step", p["step_s"], med("train_step")),
             ("forward + backward", p["backward_s"], med("forward_backward")),
             ("update", p["update_s"], med("update"))]
    # The CPU's own updates: when the first starts after the step's start,
    # and how long they take together (predicted lane "predicted cpu";
    # measured lane "cpu", loomrt_step_host_begin/end).
    def lane_tids(trace, want):
        return {e["tid"] for e in trace.get("traceEvents", [])
                if e.get("ph") == "M" and e.get("name") == "thread_name"
                and e.get("args", {}).get("name") == want}
    pcpu = lane_tids(pred, "predicted cpu")
    pc = [e for e in pred["traceEvents"] if e.get("ph") == "X" and e.get("tid") in pcpu]
    mcpu = lane_tids(meas, "cpu")
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["name"] == "train_step")[1:]
    starts, busy = [], []
    for a, b in steps:
        # The host's spans of this step (they may end after the compute
        # stream's train_step span only if the host outlives it: allow a
        # tenth of the step).
        mine = [e for e in spans if e.get("tid") in mcpu and a <= e["ts"] <= b + 0.1 * (b - a)]
        if mine:
            starts.append((min(e["ts"] for e in mine) - a) / 1e6)
            busy.append(sum(e["dur"] for e in mine) / 1e6)
    if pc and starts:
        rows += [("cpu updates start", min(e["ts"] for e in pc) / 1e6, statistics.median(starts)),
                 ("cpu updates busy", sum(e["dur"] for e in pc) / 1e6, statistics.median(busy))]
    print(f"{'phase':20} {'predicted s':>12} {'measured s':>11} {'pred/meas':>9}")
    for name, a, b in rows:
        print(f"{name:20} {a:12.4f} {b:11.4f} {a / b if b else float('nan'):9.2f}")
    print(f"predicted peak device memory: {p['peak_device_bytes'] / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
