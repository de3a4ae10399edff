#!/usr/bin/env python3
"""Who waits at each collective of a 2-rank run: reads two
LOOM_KERNEL_SPANS files (bench/kernel_times.cpp: each rank's kernels over
the second half of its run, CUPTI's clock, which ranks on one host share),
pairs the ranks' NCCL kernels (the same collectives in the same order: a
pair is of one kind and overlaps in time), and per kind prints the collectives, how long
each rank's kernel waited for the other to arrive, the time after both
had arrived, and, while the early rank waited, how busy the late rank's
compute kernels were (busy: the late rank was still computing, a
difference of work; idle: its kernels were not queued yet, the host was
late). Times are per step over the common window.
  bench/moe_ep_waits.py RANK0.spans RANK1.spans STEP_SECONDS"""
import sys


def load(path):
    comp, nccl = [], []
    for line in open(path):
        kind, s, e, st = line.split()
        (comp if kind == "c" else nccl).append((int(s), int(e), kind))
    return sorted(comp), sorted(nccl)


def busy(comp, lo, hi):
    """Nanoseconds of [lo, hi) some compute kernel of `comp` covers."""
    total, at = 0, lo
    for s, e, _ in comp:
        if e <= at or s >= hi:
            continue
        a, b = max(s, at), min(e, hi)
        if b > a:
            total += b - a
            at = b
    return total


def main():
    (c0, n0), (c1, n1) = load(sys.argv[1]), load(sys.argv[2])
    step = float(sys.argv[3])
    lo = max(n0[0][0], n1[0][0])
    n0 = [x for x in n0 if x[0] >= lo]
    n1 = [x for x in n1 if x[0] >= lo]
    pairs, i, j = [], 0, 0
    while i < len(n0) and j < len(n1):
        a, b = n0[i], n1[j]
        if a[2] == b[2] and min(a[1], b[1]) > max(a[0], b[0]):  # overlapping: one collective
            pairs.append((a, b))
            i, j = i + 1, j + 1
        elif a[1] <= b[0]:
            i += 1
        else:
            j += 1
    if not pairs:
        sys.exit("no collective pairs found")
    window = (max(pairs[-1][0][1], pairs[-1][1][1]) - pairs[0][0][0]) / 1e9
    steps = max(window / step, 1e-9)
    rows = {}
    for a, b in pairs:
        arrive = max(a[0], b[0])
        late, comp_late = (b, c1) if b[0] > a[0] else (a, c0)
        early = a if late is b else b
        r = rows.setdefault(a[2], [0, 0.0, 0.0, 0.0, 0.0, 0.0])
        r[0] += 1
        r[1] += (arrive - a[0]) / 1e6
        r[2] += (arrive - b[0]) / 1e6
        r[3] += (min(a[1], b[1]) - arrive) / 1e6
        r[4] += busy(comp_late, early[0], arrive) / 1e6
        r[5] += (arrive - early[0]) / 1e6
    print(f"{len(pairs)} collectives paired ({len(n0)} and {len(n1)} NCCL kernels), window "
          f"{window:.3f} s = {steps:.1f} steps of {step:.4f} s")
    names = {"S": "all-to-all (send/recv)", "A": "all-reduce", "R": "reduce-scatter",
             "G": "all-gather", "?": "other"}
    print("| collective | count a step | rank 0 waits, ms a step | rank 1 waits, ms a step "
          "| both arrived, ms a step | late rank computing while the other waits |")
    print("|---|---|---|---|---|---|")
    for st, r in sorted(rows.items()):
        share = r[4] / r[5] if r[5] else 0.0
        print(f"| {names.get(st, st)} | {r[0] / steps:.1f} | {r[1] / steps:.2f} | {r[2] / steps:.2f} | "
              f"{r[3] / steps:.2f} | {100 * share:.0f}% |")


if __name__ == "__main__":
    main()
