#!/usr/bin/env bash
# Dropout on the GPU draws the CPU's masks (a counter-based hash of --seed,
# the step, the op and the element): the zoo's -dropout models trained with
# dropout on by the CUDA binary (fp32) must give the CPU binary's losses,
# step by step, within 1e-4 (float32 arithmetic in another order, through
# 20 Adam steps); a mask that differed would move the loss by about the
# spread across seeds (1.5e-2, check_zoo.py).
#   here (loomc built):  test/Zoo/dropout-gpu.sh gen   -> .carry/zoo-dropout
#   on a GPU host:       test/Zoo/dropout-gpu.sh run   (prints a table last)
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=.carry/zoo-dropout
NAMES=(gpt2-dropout gpt-neox-dropout)
STEPS=20 SEED=3
if [ "${1:-}" = gen ]; then
  BIN=${BIN:-build/bin}
  rm -rf "$SRC" && mkdir -p "$SRC"
  T=$(mktemp -d)
  trap 'rm -rf "$T"' EXIT
  tar -C "$T" -xzf test/Zoo/zoo.tgz
  cp "$T/zoo/tokens.bin" "$SRC/"
  for n in "${NAMES[@]}"; do
    "$BIN/loomc" "$T/zoo/$n.onnx" --target=cuda --compile-to=cpp -o "$SRC/$n.cpp" 2> "$SRC/$n.loomc.log"
    "$BIN/loomc" "$T/zoo/$n.onnx" -o "$T/$n" 2>> "$SRC/$n.loomc.log"
    OMP_NUM_THREADS=1 "$T/$n" --data "$T/zoo/tokens.bin" --steps $STEPS --seed $SEED \
      --log-json "$SRC/$n.cpu.jsonl" > /dev/null
  done
  ls "$SRC"
  exit 0
fi
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime
for n in "${NAMES[@]}"; do
  link_binary "$SRC/$n.cpp" "/tmp/drop_$n" -O1
  rm -f "$OUT/$n.cuda.jsonl"
  "/tmp/drop_$n" --data "$SRC/tokens.bin" --steps $STEPS --seed $SEED \
    --weights "$SRC/$n.cpp.weights.safetensors" --log-json "$OUT/$n.cuda.jsonl" > "$OUT/$n.txt" 2>&1 ||
    echo "$n failed: $(tail -2 "$OUT/$n.txt" | tr '\n' ' ')"
done
python3 - "$OUT" "$SRC" "${NAMES[@]}" <<'PY'
import json, math, sys
out, src, names = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"{'model (dropout 0.2)':20} {'steps':>5} {'cpu first -> last':>18} {'cuda first -> last':>19} {'max |cuda - cpu|':>17} verdict")
bad = 0
for n in names:
    cpu = [json.loads(l)["loss"] for l in open(f"{src}/{n}.cpu.jsonl")]
    try:
        gpu = [json.loads(l)["loss"] for l in open(f"{out}/{n}.cuda.jsonl")]
    except OSError:
        gpu = []
    ok = len(gpu) == len(cpu) and all(g is not None and math.isfinite(g) for g in gpu)
    worst = max(abs(g - c) for g, c in zip(gpu, cpu)) if ok else float("inf")
    ok = ok and worst <= 1e-4
    bad += not ok
    g = f"{gpu[0]:.5f} -> {gpu[-1]:.5f}" if ok else str(gpu[:2])
    print(f"{n:20} {len(cpu):5} {cpu[0]:.5f} -> {cpu[-1]:.5f} {g:>19} {worst:17.1e} {'ok' if ok else 'FAIL'}")
print(f"{len(names) - bad} of {len(names)} CUDA fp32 runs with dropout within 1e-4 of the CPU binary")
sys.exit(1 if bad else 0)
PY
