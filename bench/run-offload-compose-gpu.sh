#!/usr/bin/env bash
# On a GPU host, after bench/gen-offload-compose-gpu.sh: offload composed
# with 1-bit Adam (ZeRO 0-2, freeze after step 5; AdamW at ZeRO 1-2
# beside it) and with Streaming
# DiLoCo (2 replicas, H=4, P=2, tau=1, fp4), GPT 6 layers d512 bf16, 20
# steps on random tokens. Two ranks share GPU 0 over the runtime's TCP
# transport (LOOMRT_TRANSPORT=tcp: one GPU is what is lent; the question
# here is the bits, not the speed): each offloaded run's losses against the
# same run without offload, which must be equal at every step (the CPU's
# Adam, SGD and lerp round as the GPU's do). Needs .carry/googletest (a
# copy of /usr/src/googletest) for the runtime's tests. Prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
export MASTER_ADDR=127.0.0.1 LOOMRT_TRANSPORT=tcp
export LOOMRT_JOB_KEY=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest"
# The 1-bit codec's tests on CUDA first: its scale is the same bits on every
# call (the GPU's norm added block sums by atomicAdd until issue 44).
ninja -C build-bench loomrt-tests >> "$OUT/ninja.log" 2>&1 || echo "tests build failed"
"$(find build-bench -name loomrt-tests -type f | head -1)" --gtest_filter='*OneBit*:*Sgd*:*Lerp*' \
  --gtest_brief=1 2>&1 | tail -4
C=.carry/offcomp
for f in "$C"/*.cpp; do
  b=$(basename "$f" .cpp); link_binary "$f" "/tmp/$b" -O1 2> "$OUT/$b.compile.log" || echo "compiling $b failed" &
done
wait
write_tokens 50304 /tmp/tok.bin
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
port=29700
for f in "$C"/*.cpp; do
  b=$(basename "$f" .cpp); port=$((port + 1)); rm -f "$OUT/$b.jsonl"
  for r in 0 1; do # both ranks on GPU 0
    RANK=$r LOCAL_RANK=0 WORLD_SIZE=2 MASTER_PORT=$port timeout 300 "/tmp/$b" --data /tmp/tok.bin \
      --steps 20 --log-json "$OUT/$b.jsonl" > "$OUT/$b.$r" 2>&1 &
  done
  wait || true
  [ -s "$OUT/$b.jsonl" ] || { echo "$b failed:"; tail -n 3 "$OUT/$b".{0,1}; }
done
python3 - "$OUT" <<'PY'
import sys
sys.path.insert(0, "bench")
from jsonlog import loss_table
from jsonlog import steps
out = sys.argv[1]
runs = [(r, o) for r in ("ob0", "ob1", "ob2", "z1", "z2", "dl") for o in ("cpu", "static")
        if steps(out, f"{r}-{o}")]
for r, o in runs:  # the first step whose loss differs, and the losses there
    a, b = steps(out, f"{r}-{o}"), steps(out, f"{r}-none")
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x["loss"] != y["loss"]), None)
    print(f"{r}-{o}: " + ("identical losses" if first is None else
          f"first differs at step {first + 1}: {a[first]['loss']!r} vs {b[first]['loss']!r}"))
loss_table(out, ["run", "offload"], [((r, o), f"{r}-{o}", f"{r}-none") for r, o in
                                     [(r, "none") for r in ("ob0", "ob1", "ob2", "z1", "z2", "dl")]
                                     + runs])
PY
