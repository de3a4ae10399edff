#!/usr/bin/env bash
# On a host with four GPUs: issue 19's hierarchical run, sources and
# predictions from bench/gen-zeropp-gpu.sh. The four GPUs stand for two
# nodes of two: NVLink inside a "node", and between the nodes an emulated
# link of 12.5 GB/s (100 Gbit/s): LOOMRT_SLOW_LINK=2:12.5 holds the comm
# stream of every collective whose communicator spans both pairs until the
# bytes this rank sent would have crossed such a link (loomrt_comm_shape;
# no tc or NIC to shape here). Measured first: comm_bench's bus bandwidth
# over the 4 ranks with the shaping and without. Then GPT 1.3B, ZeRO-3,
# bf16, 10 steps each of flat and hierarchical (qwZ + qgZ, plan auto), on
# the emulated link and on NVLink alone. Prints a table last: mean step of
# steps 3-10, bytes a step per communicator, the first and last loss.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/zeropp
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
build_runtime all -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest"
for f in flat hier; do
  link_binary "$GEN/$f.cpp" "/tmp/zp_$f" 2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
T=$(find build-bench -name loomrt-tests -type f | head -1)
$T --gtest_filter='*BlockCodec*' --gtest_brief=1 > "$OUT/gtest.txt" 2>&1
tail -n 3 "$OUT/gtest.txt"
wait
source bench/launch.sh
launch 4 "$OUT/bw-shaped" build-bench/bin/comm_bench cuda --iters 3 --max-mib 256 --shape 12.5 ||
  tail -n 3 "$OUT/bw-shaped.0"
launch 4 "$OUT/bw-nvlink" build-bench/bin/comm_bench cuda --iters 3 --max-mib 256 ||
  tail -n 3 "$OUT/bw-nvlink.0"
for f in flat hier; do
  export LOOMRT_SLOW_LINK=2:12.5
  run_logged 4 "$f-slow" "/tmp/zp_$f" --data "$GEN/gpl3.bin" --steps 10
  unset LOOMRT_SLOW_LINK
  run_logged 4 "$f-nvlink" "/tmp/zp_$f" --data "$GEN/gpl3.bin" --steps 10
done
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
python3 - "$OUT" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
import jsonlog
out = sys.argv[1]
for name in ("bw-shaped", "bw-nvlink"):
    rows = [json.loads(l) for l in open(f"{out}/{name}.0") if l.startswith("{")]
    big = [r for r in rows if r["dtype"] == "fp32"][-2:]
    print(name, " ".join(f"{r['op']} {r['bytes'] >> 20} MiB {r['busbw_gbs']:.1f} GB/s" for r in big))
print("| run | mean step (3-10) | bytes a step by group | loss first -> last |")
for link in ("slow", "nvlink"):
    for f in ("flat", "hier"):
        r = jsonlog.steps(out, f"{f}-{link}")
        if not r:
            print(f"| {f} {link} | failed | | |")
            continue
        mean = statistics.mean(x["step_ms"] for x in r[2:]) / 1e3
        print(f"| {f} {link} | {mean:.3f} s | {r[-1]['comm_bytes']} {r[-1].get('comm_bytes_by_group', {})} "
              f"| {r[0]['loss']:.4f} -> {r[-1]['loss']:.4f} |")
PY
