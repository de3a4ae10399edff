#!/usr/bin/env bash
# On a GPU host: builds the runtime, compiles the zoo's CUDA sources
# (test/Zoo/gen-zoo-gpu.sh, bf16), trains each 10 steps on the zoo's tokens
# and compares with PyTorch's float32 losses recorded in the zoo: bf16
# tolerance, every step within 1e-2 relative (8 significant bits, 2^-9 per
# rounding, compounded over 10 steps: test/Integration/binary_vs_torch.py's
# bound). Prints a table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
SRC=.carry/zoo
source bench/gpu-runtime.sh
build_runtime
names=$(cd "$SRC" && ls *.cpp | sed 's/\.cpp$//')
for n in $names; do
  link_binary "$SRC/$n.cpp" "/tmp/zoo_$n" 2> "$OUT/$n.compile.log" ||
    echo "compiling $n failed: $(tail -1 "$OUT/$n.compile.log")" &
done
wait
for n in $names; do
  rm -f "$OUT/$n.jsonl"
  # A classifier reads its arrays, a language model the tokens.
  data=(--data "$SRC/tokens.bin")
  if ls "$SRC/$n".*.npy > /dev/null 2>&1; then
    data=()
    for f in "$SRC/$n".*.npy; do
      i=${f#"$SRC/$n."}
      data+=(--input "${i%.npy}=$f")
    done
  fi
  "/tmp/zoo_$n" "${data[@]}" --steps 10 --weights "$SRC/$n.cpp.weights.safetensors" \
    --log-json "$OUT/$n.jsonl" > "$OUT/$n.txt" 2>&1 || echo "$n failed: $(tail -2 "$OUT/$n.txt" | tr '\n' ' ')"
done
python3 - "$OUT" "$SRC" $names <<'PY'
import json, math, sys
out, src, names = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"{'model':16} {'cuda bf16 first -> last':>24} {'torch fp32 first -> last':>25} {'max rel diff':>13} verdict")
bad = 0
for n in names:
    ref = json.load(open(f"{src}/{n}.json"))["losses"]
    try:
        got = [json.loads(l)["loss"] for l in open(f"{out}/{n}.jsonl")]
    except OSError:
        got = []
    ok = len(got) == len(ref) and all(g is not None and math.isfinite(g) for g in got)
    worst = max(abs(g - r) / abs(r) for g, r in zip(got, ref)) if ok else float("inf")
    ok = ok and worst <= 1e-2
    bad += not ok
    first = f"{got[0]:.4f} -> {got[-1]:.4f}" if got and None not in got else str(got[:2])
    print(f"{n:16} {first:>24} {ref[0]:.4f} -> {ref[-1]:.4f}{'':>7} {worst:13.1e} {'ok' if ok else 'FAIL'}")
print(f"{len(names) - bad} of {len(names)} within 1e-2 relative of PyTorch fp32 (bf16 tolerance)")
PY
