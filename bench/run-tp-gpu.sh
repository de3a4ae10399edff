#!/usr/bin/env bash
# On a GPU host, after bench/gen-tp-gpu.sh (and with RT set to a built
# runtime, or building it): tensor parallelism on the CUDA path. Each model
# 20 steps on one rank, then with --tensor-parallel=2 (and with
# --sequence-parallel too) on two ranks that
# share GPU 0 over the runtime's TCP transport (one GPU is what is lent:
# this is about the bits, not the speed). Prints the largest relative
# difference of the losses, which the CPU test holds to 1e-6 (bf16: 1e-3).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
# GPUS=2 (a two-GPU host): one rank a GPU over NCCL instead.
export MASTER_ADDR=127.0.0.1
export LOOMRT_JOB_KEY=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
source bench/gpu-runtime.sh
if [ "${GPUS:-1}" = 2 ]; then
  [ -n "${RT:-}" ] || build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" \
    -DCMAKE_CUDA_ARCHITECTURES=90
else
  export LOOMRT_TRANSPORT=tcp
  [ -n "${RT:-}" ] || build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
fi
C=.carry/tp
for f in "$C"/*.cpp; do
  b=$(basename "$f" .cpp); link_binary "$f" "/tmp/$b" -O1 2> "$OUT/$b.compile.log" || echo "compiling $b failed" &
done
wait
write_tokens 1024 /tmp/tok1k.bin 400000
MODELS="gpt llama gpt-bf16 llama-bf16"
for m in $MODELS; do
  rm -f "$OUT/$m-1.jsonl" "$OUT/$m-tp2.jsonl" "$OUT/$m-sp2.jsonl"
  timeout 120 "/tmp/$m-1" --data /tmp/tok1k.bin --steps 20 --log-json "$OUT/$m-1.jsonl" \
    > "$OUT/$m-1.txt" 2>&1 || echo "$m-1 failed: $(tail -2 "$OUT/$m-1.txt")"
  for v in tp2 sp2; do
    [ -f "/tmp/$m-$v" ] || continue
    for r in 0 1; do
      RANK=$r LOCAL_RANK=$([ "${GPUS:-1}" = 2 ] && echo $r || echo 0) WORLD_SIZE=2 MASTER_PORT=$((29800 + ${#m} + ${#v})) timeout 120 "/tmp/$m-$v" \
        --data /tmp/tok1k.bin --steps 20 --log-json "$OUT/$m-$v.jsonl" > "$OUT/$m-$v.$r" 2>&1 &
    done
    wait || true
    [ -s "$OUT/$m-$v.jsonl" ] || { echo "$m-$v failed:"; tail -n 3 "$OUT/$m-$v".{0,1}; }
  done
done
python3 - "$OUT" $MODELS <<'PY'
import json, sys
out, models = sys.argv[1], sys.argv[2:]
def losses(name):
    try:
        return [json.loads(l)["loss"] for l in open(f"{out}/{name}.jsonl") if '"loss"' in l]
    except OSError:
        return []
print("| model | one rank, loss 1 -> 20 | --tensor-parallel=2, max relative difference | with --sequence-parallel |")
print("|---|---|---|---|")
def diff(a, b):
    if not a or len(a) != len(b):
        return f"failed ({len(b)} of {len(a)} steps)"
    return f"{max(abs(x - y) / abs(x) for x, y in zip(a, b)):.2e}"
for m in models:
    a = losses(f"{m}-1")
    first = f"{a[0]:.6f} -> {a[-1]:.6f}" if a else "failed"
    print(f"| {m} | {first} | {diff(a, losses(f'{m}-tp2'))} | {diff(a, losses(f'{m}-sp2'))} |")
PY
