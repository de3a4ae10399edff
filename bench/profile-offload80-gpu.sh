#!/usr/bin/env bash
# On a one-H200 host: where the GPU time of issue 44's interleaved 80-GiB
# rows goes, kernel by kernel, beside the step simulation's prediction of
# the same calls (the binaries and timelines of bench/gen-offload80-gpu.sh).
# Once these rows became GPU-bound (resident updates in the backward,
# recompute chosen for speed) their predictions drifted 4-13% pessimistic;
# this tells which calls the cost model prices wrong. Each binary runs
# STEPS steps (default 8) under CUPTI (bench/kernel_times.cpp); a kernel's
# time a step is its total over the run over STEPS (the initialisation's
# fills are listed apart). Prints, per row, measured and predicted GPU time
# a step by class of call, and writes $OUT/ROW.kernels.csv.
#   OUT=/tmp/o ROWS="l71-int" bench/profile-offload80-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
STEPS="${STEPS:-8}"
C=.carry/off80
mkdir -p "$OUT"
ROWS="${ROWS:-g625-int l71-int l67-int}"
source bench/gpu-runtime.sh
[ -n "${RT:-}" ] || build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
build_kernel_times
for r in $ROWS; do
  [ -x "/tmp/$r" ] && [ "/tmp/$r" -nt "$C/$r.cpp.gz" ] && continue
  link_gz "$C/$r.cpp.gz" "/tmp/$r" &
done
[ -f /tmp/tok32k.bin ] || write_tokens 32000 /tmp/tok32k.bin 2_000_000
[ -f /tmp/tok50k.bin ] || write_tokens 50304 /tmp/tok50k.bin 2_000_000
wait
for r in $ROWS; do
  tok=/tmp/tok32k.bin; [[ $r == g* ]] && tok=/tmp/tok50k.bin
  # The preload goes to the binary alone: timeout would load it too and,
  # exiting last, overwrite the binary's table with its own empty one.
  timeout 200 env LD_PRELOAD=/tmp/libkt.so LOOM_KERNEL_TIMES="$OUT/$r.kernels.csv" "/tmp/$r" \
    --data "$tok" --steps "$STEPS" --seed 1 --log-json "$OUT/$r.prof.jsonl" > "$OUT/$r.prof.txt" 2>&1 ||
    echo "  $r failed: $(tail -2 "$OUT/$r.prof.txt" | tr '\n' ' ')"
done
python3 - "$OUT" "$C" "$STEPS" $ROWS <<'PY'
import collections, csv, json, re, statistics, sys
out, c, steps, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
# Kernel name -> the class of loomrt call it serves (the timeline's span
# names are the calls' names).
def kclass(name):
    n = name.lower()
    if "gemm" in n or "nvjet" in n or "xmma" in n or "cutlass" in n: return "matmul"
    for key, cls in (("adamkernel", "adam"), ("castkernel", "cast"), ("castword", "cast"), ("attention", "attention"),
                     ("flash", "attention"), ("rowdot", "attention"), ("copystrided", "copy"),
                     ("copyrows", "copy"), ("layernorm", "norm"), ("rmsnorm", "norm"),
                     ("crossentropy", "cross_entropy"), ("embedding", "embedding"),
                     ("reduce", "reduce"), ("fusedinterpret", "fused"), ("fused", "fused"),
                     ("unarygrad", "unary_grad"), ("unary", "unary"), ("binary", "binary"),
                     ("fill", "fill"), ("softmax", "softmax"), ("meankernel", "cross_entropy")):
        if key in n: return cls
    return "other:" + name[:40]
def pclass(name):
    if name in ("matmul", "adam", "cast"): return name
    if name.startswith("attention"): return "attention"
    if name in ("transpose", "concat", "slice", "copy", "memcpy"): return "copy"
    if "norm" in name: return "norm"
    if name.endswith("_grad") and name not in ("embedding_grad",): return "unary_grad"
    if name in ("add", "mul", "sub", "div", "where", "max", "min", "pow"): return "binary"
    if name in ("gelu", "silu", "neg", "exp", "tanh", "sigmoid", "rsqrt", "sqrt", "relu"): return "unary"
    if name.startswith("cross_entropy"): return "cross_entropy"
    if name.startswith("embedding"): return "embedding"
    if name.startswith("fused"): return "fused"
    return name
for r in rows:
    meas = collections.Counter(); calls = collections.Counter(); other = collections.Counter()
    try:
        for name, n, ns in csv.reader(open(f"{out}/{r}.kernels.csv")):
            k = kclass(name)
            meas[k] += int(ns) / 1e6 / steps; calls[k] += int(n) / steps
            if k.startswith("other"): other[name] += int(ns) / 1e6 / steps
    except OSError:
        print(f"{r}: no kernel times"); continue
    pred = collections.Counter(); pcalls = collections.Counter()
    tl = json.load(open(f"{c}/{r}.timeline.json"))
    for e in (tl["traceEvents"] if isinstance(tl, dict) else tl):
        if e.get("ph") == "X" and e.get("tid") == 0:
            pred[pclass(e["name"])] += e["dur"] / 1e3; pcalls[pclass(e["name"])] += 1
    log = [json.loads(l) for l in open(f"{out}/{r}.prof.jsonl")]
    log = [s for s in log if "event" not in s]
    step = statistics.median(s["step_ms"] for s in log[2:]) if len(log) > 2 else float("nan")
    print(f"\n{r}: step {step:.1f} ms under CUPTI (median of steps 3-{len(log)}); "
          f"GPU kernels {sum(meas.values()):.1f} ms a step measured, {sum(pred.values()):.1f} predicted")
    print("| class | measured ms | predicted ms | pred/meas | kernels a step | calls predicted |")
    print("|---|---|---|---|---|---|")
    for k in sorted(set(meas) | set(pred), key=lambda k: -max(meas[k], pred[k])):
        if max(meas[k], pred[k]) < 0.5: continue
        ratio = f"{pred[k] / meas[k]:.2f}" if meas[k] > 0 else ""
        print(f"| {k} | {meas[k]:.1f} | {pred[k]:.1f} | {ratio} | {calls[k]:.0f} | {pcalls[k]} |")
    for name, ms in other.most_common(5):
        print(f"  other kernel: {name[:100]} {ms:.2f} ms")
PY
