#!/usr/bin/env python3
"""Issue 53's convergence tables from the training binaries' --log-json
files in OUT (bench/run-convergence-gpu.sh writes them): per codec row, the
mean loss of the last 50 steps and its gap to the uncompressed run's, the
mean step on NVLink and on the emulated slow link with loomc's predictions
beside them (GEN/ROW.predicted.txt, GEN/ROW.slow.txt), and the loss curves
as a CSV and an SVG plot (no plotting package needed).

    convergence.py OUT [--gen DIR] [--csv FILE] [--svg FILE] [--base flat]
    convergence.py --from-csv FILE --svg FILE   (re-plot a committed CSV)
"""
import argparse
import json
import os
import re
import statistics

ORDER = ["flat", "dp", "qwz", "qgz", "zpp", "onebit", "obr10", "obr25", "diloco", "dl32"]
COLORS = ["#000000", "#777777", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
          "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


def steps(out, name):
    try:
        return [s for s in (json.loads(l) for l in open(os.path.join(out, name + ".jsonl")))
                if "loss" in s]
    except (OSError, ValueError):
        return []


def predicted(gen, row, kind):
    """loomc's predicted step (seconds) for ROW: after the freeze for 1-bit
    Adam, the mean over the outer period for Streaming DiLoCo."""
    try:
        text = open(os.path.join(gen, f"{row}.{kind}.txt")).read()
    except (OSError, TypeError):
        return None
    for pat in (r"after the freeze \(1-bit Adam\)[^\n]*?: ([0-9.]+) s",
                r"predicted Streaming DiLoCo[^\n]*?: mean step ([0-9.]+) s",
                r"predicted step[^\n]*?: ([0-9.]+) s \(last gradient"):
        m = re.search(pat, text)
        if m:
            return float(m.group(1))
    return None


def median_step(r, first):
    ms = [x["step_ms"] for x in r[first:]]
    return statistics.median(ms) / 1e3 if ms else float("nan")


def last50(r):
    return statistics.mean(x["loss"] for x in r[-50:])


def svg(curves, path, title):
    """curves: {name: [(step, loss)]}, plotted smoothed over 10 steps."""
    W, H, L, R, T, B = 760, 440, 60, 150, 30, 40
    pts = [p for c in curves.values() for p in c]
    if not pts:
        return
    x1 = max(s for s, _ in pts)
    sm = {}
    for name, c in curves.items():
        ys = [l for _, l in c]
        sm[name] = [(c[i][0], statistics.mean(ys[max(0, i - 9):i + 1])) for i in range(len(c))]
    tail = [l for c in sm.values() for s, l in c if s >= min(50, x1 // 2)]
    # The top at the 95th percentile: a run that diverges is clipped at the
    # top edge rather than squeezing the others flat.
    tail.sort()
    y0, y1 = tail[0] * 0.97, tail[int(0.95 * (len(tail) - 1))] * 1.03
    def X(s):
        return L + (W - L - R) * (s - 1) / max(1, x1 - 1)
    def Y(v):
        return T + (H - T - B) * (1 - (min(max(v, y0), y1) - y0) / (y1 - y0))
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{L}" y="18">{title}</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
    for k in range(6):
        v = y0 + (y1 - y0) * k / 5
        o.append(f'<text x="{L - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        o.append(f'<line x1="{L}" y1="{Y(v):.1f}" x2="{W - R}" y2="{Y(v):.1f}" stroke="#eee"/>')
    for k in range(6):
        s = 1 + (x1 - 1) * k // 5
        o.append(f'<text x="{X(s):.1f}" y="{H - B + 16}" text-anchor="middle">{s}</text>')
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 6}" text-anchor="middle">step (loss smoothed over 10 steps)</text>')
    for i, (name, c) in enumerate(sm.items()):
        col = COLORS[i % len(COLORS)]
        o.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.3" points="' +
                 " ".join(f"{X(s):.1f},{Y(v):.1f}" for s, v in c) + '"/>')
        o.append(f'<text x="{W - R + 8}" y="{T + 16 * i + 10}" fill="{col}">{name}</text>')
    o.append("</svg>")
    open(path, "w").write("\n".join(o) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?")
    p.add_argument("--gen")
    p.add_argument("--csv")
    p.add_argument("--svg")
    p.add_argument("--from-csv")
    p.add_argument("--base", default="flat")
    p.add_argument("--title", default="1.1B Llama, bf16, 2 H200s, 16 x 1024 byte tokens a step of the "
                   "Python sources: loss by codec")
    a = p.parse_args()
    if a.from_csv:
        rows = [l.rstrip("\n").split(",") for l in open(a.from_csv)]
        names = rows[0][1:]
        curves = {n: [(int(r[0]), float(r[i + 1])) for r in rows[1:] if r[i + 1]]
                  for i, n in enumerate(names)}
        svg(curves, a.svg, a.title)
        return
    logs = {}
    for f in sorted(os.listdir(a.out)):
        if f.endswith(".jsonl"):
            name = f[:-6]
            r = steps(a.out, name)
            if r:
                logs[name] = r
    conv = [n for n in ORDER if n in logs] + sorted(
        n for n in logs if n not in ORDER and not n.startswith(("slow-", "gpl-")))
    base = logs.get(a.base)
    print(f"| row | steps | median step (6-) | predicted | loss first -> last | mean of last 50 | gap to {a.base} |")
    print("|---|---|---|---|---|---|---|")
    for n in conv:
        r = logs[n]
        pred = predicted(a.gen, n, "predicted")
        gap = (last50(r) / last50(base) - 1) if base and len(base) == len(r) else float("nan")
        print(f"| {n} | {len(r)} | {median_step(r, 5):.3f} s | {pred if pred else '-'} | "
              f"{r[0]['loss']:.4f} -> {r[-1]['loss']:.4f} | {last50(r):.4f} | {gap:+.2%} |")
    gpl = {n[4:]: logs[n] for n in logs if n.startswith("gpl-")}
    if gpl:
        print("\nGPL-3 bytes in order, 150 steps (the issue's first measurement, on 2 GPUs): mean loss")
        print("| row | 41-50 | 91-100 | 141-150 |")
        print("|---|---|---|---|")
        for n, r in gpl.items():
            cells = [statistics.mean(x["loss"] for x in r[a0:a0 + 10]) if len(r) >= a0 + 10 else float("nan")
                     for a0 in (40, 90, 140)]
            print(f"| {n} | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
    slow = {n[5:]: logs[n] for n in logs if n.startswith("slow-")}
    if slow:
        print("\nEmulated 6.25 GB/s link (LOOMRT_SLOW_LINK=1:6.25): median step, loomc's prediction")
        print("| row | median step | predicted | speed-up over its baseline |")
        print("|---|---|---|---|")
        ref = {"qwz": "flat", "qgz": "flat", "zpp": "flat", "onebit": "dp", "ob5": "dp", "diloco": "dp"}
        med = {}
        for n, r in slow.items():
            # 1-bit Adam's rows: the steps after the freeze (ob5 freezes at 5).
            med[n] = median_step(r, 7 if n == "ob5" else 5)
        for n, r in slow.items():
            b = ref.get(n)
            up = f"{med[b] / med[n]:.2f}x over {b}" if b in med else "-"
            print(f"| {n} | {med[n]:.3f} s | {predicted(a.gen, n, 'slow') or '-'} | {up} |")
    if a.csv and conv:
        n_max = max(len(logs[n]) for n in conv)
        with open(a.csv, "w") as f:
            f.write("step," + ",".join(conv) + "\n")
            for i in range(n_max):
                f.write(f"{i + 1}," + ",".join(f"{logs[n][i]['loss']:.5f}" if i < len(logs[n]) else ""
                                               for n in conv) + "\n")
    if a.svg and conv:
        svg({n: [(i + 1, x["loss"]) for i, x in enumerate(logs[n])] for n in conv}, a.svg, a.title)


if __name__ == "__main__":
    main()
