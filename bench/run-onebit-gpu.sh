#!/usr/bin/env bash
# On a host with two GPUs (nvidia-h100-x2): 1-bit Adam against ZeRO-0 data
# parallelism, GPT-2 124M bf16, global batch 16 x 1024, over NVLink and over
# NCCL's socket transport on the loopback (an emulated commodity network:
# NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket
# NCCL_SOCKET_IFNAME=lo). Sources from bench/gen-onebit-gpu.sh (.carry/onebit).
# 12 steps each; 1-bit Adam freezes after 5. Prints a table last: median
# step time before and after the freeze, the all-reduce bus bandwidth of
# the link, and the communication time a step (step - the one-GPU step).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/onebit
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
build_runtime all -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90
for f in z0 ob obb one; do
  link_binary "$GEN/$f.cpp" "/tmp/ob_$f" 2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
wait
source bench/launch.sh
/tmp/ob_one --data "$GEN/gpl3.bin" --steps 12 --log-json "$OUT/one.jsonl" > "$OUT/one.txt" 2>&1 ||
  tail -3 "$OUT/one.txt"
for link in nvlink socket; do
  if [ $link = socket ]; then
    export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo
  fi
  launch 2 "$OUT/bw_$link" build-bench/bin/comm_bench cuda --iters 5 --max-mib 512 ||
    tail -3 "$OUT/bw_$link".0
  for f in z0 ob obb; do
    run_logged 2 "${f}_$link" /tmp/ob_$f --data "$GEN/gpl3.bin" --steps 12
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
import jsonlog
out = sys.argv[1]
steps = lambda name: jsonlog.steps(out, name)
med = lambda xs: statistics.median(xs) if xs else float("nan")
one = med([s["step_ms"] for s in steps("one")[2:]])
print(f"one GPU, 8 x 1024 (one rank's compute): {one:.1f} ms a step")
for link in ("nvlink", "socket"):
    bw = [json.loads(l) for l in open(f"{out}/bw_{link}.0") if l.startswith("{")]
    ar = [r for r in bw if r["op"] == "all_reduce" and r["dtype"] == "fp32"]
    big = max(ar, key=lambda r: r["bytes"]) if ar else None
    print(f"{link}: all-reduce f32 {big['bytes'] >> 20} MiB: {big['busbw_gbs']:.2f} GB/s bus"
          if big else f"{link}: no bandwidth measured")
    z0 = steps(f"z0_{link}")
    base = med([s["step_ms"] for s in z0[2:]])
    print(f"  {'run':28} {'before freeze':>14} {'after freeze':>13} {'comm/step':>10} {'bytes/step':>11} {'vs ZeRO-0':>10}")
    print(f"  {'ZeRO-0 (bf16 grads)':28} {base:11.1f} ms {'':>13} {base - one:7.1f} ms "
          f"{z0[-1]['comm_bytes'] if z0 else 0:11d} {1.0:9.2f}x")
    for f, what in (("ob", "1-bit Adam, per parameter"), ("obb", "1-bit Adam, 16M buckets")):
        r = steps(f"{f}_{link}")
        warm = med([s["step_ms"] for s in r[2:5]])
        frozen = med([s["step_ms"] for s in r[6:]])
        print(f"  {what:28} {warm:11.1f} ms {frozen:10.1f} ms {frozen - one:7.1f} ms "
              f"{r[-1]['comm_bytes'] if r else 0:11d} {base / frozen:9.2f}x")
PY
