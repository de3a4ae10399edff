#!/usr/bin/env bash
# On a host with two GPUs: Streaming DiLoCo's step time on a 1 Gbit/s link
# between the replicas (issue 18), sources from bench/gen-diloco-gpu.sh.
# The link: the runtime's elastic TCP transport (LOOMRT_TRANSPORT=tcp) over
# the loopback with each rank's sending capped at 1000 Mbit/s
# (LOOMRT_TCP_MBITS; no tc here: the device machines give no NET_ADMIN),
# measured first with comm_bench. Then, on that link, 200 steps of DiLoCo
# (H=100, P=2, tau=10, fp4: four exchanges, each beside the ten inner steps
# that follow it), 200 steps of the same binary with no outer step, and 4
# steps of ZeRO-0 data parallelism. Prints a table last: mean step time over
# steps 21-200 (DP: 2-4), the slowest step, bytes across the link; and
# each DiLoCo row's mean beside loomc's prediction (ROW.predicted.txt).
# ROWS (default "none dl dp") picks the rows (dl60, dl60t15: H=60, P=3,
# fp8 with tau 5 and 15); QUICK=1 skips the gtests and comm_bench.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/dlgpu
export MASTER_ADDR=127.0.0.1 LOOMRT_TRANSPORT=tcp LOOMRT_TCP_MBITS=1000
source bench/gpu-runtime.sh
ROWS="${ROWS:-none dl dp}"
if [ "${QUICK:-0}" = 1 ]; then
  build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
else
  build_runtime all -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest"
fi
for f in $ROWS; do
  link_binary "$GEN/$f.cpp" "/tmp/dl_$f" 2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
if [ "${QUICK:-0}" != 1 ]; then
  T=$(find build-bench -name loomrt-tests -type f | head -1)
  $T --gtest_filter='*uda*:Tcp*' --gtest_brief=1 > "$OUT/gtest.txt" 2>&1
  tail -3 "$OUT/gtest.txt"
fi
wait
source bench/launch.sh
[ "${QUICK:-0}" = 1 ] ||
  launch 2 "$OUT/bw" build-bench/bin/comm_bench cuda --iters 3 --max-mib 64 || tail -3 "$OUT/bw".0
for f in $ROWS; do
  [ "$f" = dp ] && continue
  run_logged 2 "$f" "/tmp/dl_$f" --data "$GEN/gpl3.bin" --steps 200
done
[[ " $ROWS " == *" dp "* ]] && run_logged 2 dp /tmp/dl_dp --data "$GEN/gpl3.bin" --steps 4
python3 - "$OUT" "$GEN" <<'PY'
import json, os, re, sys
sys.path.insert(0, "bench")
import jsonlog
out = sys.argv[1]
steps = lambda name: jsonlog.steps(out, name)
gen = sys.argv[2]
bw = [json.loads(l) for l in open(f"{out}/bw.0") if l.startswith("{")] if os.path.exists(f"{out}/bw.0") else []
for r in bw:
    if r["dtype"] == "fp32" and r["bytes"] >= 1 << 24:
        print(f"link: {r['op']} of {r['bytes'] >> 20} MiB fp32 in {r['ms']:.0f} ms: "
              f"{r['busbw_gbs'] * 8:.3f} Gbit/s bus")
rows = {}
for name, what, first in (("none", "no outer step (compute alone)", 20),
                          ("dl", "DiLoCo H=100 P=2 tau=10 fp4", 20),
                          ("dl60", "DiLoCo H=60 P=3 tau=5 fp8", 20),
                          ("dl60t15", "DiLoCo H=60 P=3 tau=15 fp8", 20),
                          ("dp", "data parallelism (ZeRO-0)", 1)):
    try:
        s = steps(name)[first:]
    except Exception:
        s = []
    if not s:
        print(f"{what}: no steps logged")
        continue
    ms = [x["step_ms"] for x in s]
    rows[name] = (what, sum(ms) / len(ms), max(ms), sum(x.get("comm_bytes", 0) for x in s), len(s),
                  s[-1]["loss"])
base = rows.get("none", (0, float("nan")))[1]
print(f"{'run':34} {'mean step':>10} {'slowest':>9} {'vs none':>8} {'bytes/step':>12} {'loss':>7}")
for name, (what, mean, mx, b, n, loss) in rows.items():
    print(f"{what:34} {mean:7.1f} ms {mx:6.0f} ms {mean / base:7.3f}x {b / n:12.0f} {loss:7.3f}")
# loomc's prediction of each row (the mean step over the outer period, and
# its cost over the inner step) beside the measurement.
print("| run | measured mean | vs none | predicted mean | predicted vs inner step |")
print("|---|---|---|---|---|")
for name, (what, mean, mx, b, n, loss) in rows.items():
    try:
        t = open(f"{gen}/{name}.predicted.txt").read()
        m = re.search(r"mean step ([0-9.]+) s over [0-9]+ inner steps \(([0-9.]+)% over", t)
        pred = f"{float(m.group(1)) * 1000:.1f} ms | +{m.group(2)}%"
    except Exception:
        pred = " | "
    print(f"| {what} | {mean:.1f} ms | {mean / base - 1:+.1%} | {pred} |")
PY
