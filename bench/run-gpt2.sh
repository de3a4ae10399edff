#!/usr/bin/env bash
# On a GPU host: builds the runtime, compiles the training sources that
# bench/gen-gpu-sources.sh generated on the development machine (carried in
# .carry/gen), checks each CUDA binary against the CPU binary of the same
# model (a small GPT from the generator; GPT-2- and Llama-style models
# exported from PyTorch, starting from their weights), and measures GPT-2
# 124M-shaped training throughput beside PyTorch in the same run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/gen
cmake -G Ninja -S bench -B build-bench -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest" >/dev/null &&
  ninja -C build-bench >/dev/null || { echo "runtime build failed"; exit 1; }
RT="$PWD/build-bench/runtime"
for src in "$GEN"/*.cpp; do
  f=$(basename "$src" .cpp)
  c++ -O2 -std=c++17 -I runtime/include "$src" -o "/tmp/$f" -L"$RT" -lloomrt \
    -Wl,-rpath,"$RT" 2> "$OUT/$f.compile.log" || echo "compiling $f failed (see $f.compile.log)"
done

echo "== CUDA binary against the CPU binary (20 steps, same seed, weights and data)"
for m in small onnx_gpt onnx_llama; do
  for t in cuda cpu; do
    w=(); [ -f "$GEN/${m}_$t.cpp.weights.safetensors" ] && w=(--weights "$GEN/${m}_$t.cpp.weights.safetensors")
    /tmp/${m}_$t --data "$GEN/gpl3.bin" --steps 20 --seed 1 "${w[@]}" --log-json "$OUT/${m}_$t.jsonl" \
      > "$OUT/${m}_$t.txt" 2>&1 || echo "  $m $t failed: $(tail -1 "$OUT/${m}_$t.txt")"
  done
  python3 - "$OUT" "$m" <<'PY'
import json, sys
out, m = sys.argv[1:]
g = [json.loads(l)["loss"] for l in open(f"{out}/{m}_cuda.jsonl")]
c = [json.loads(l)["loss"] for l in open(f"{out}/{m}_cpu.jsonl")]
err = max(abs(a - b) / abs(b) for a, b in zip(g, c))
print(f"  {m:10} losses {c[0]:.5f} -> {c[-1]:.5f}; max relative difference CUDA vs CPU: "
      f"{err:.2e} over {len(g)} steps (bf16 tolerance 1e-2)")
PY
done

echo "== GPT-2 124M shape (12 x 768, vocab 50257, seq 1024): tokens/s"
python3 -c "
import numpy as np; np.random.seed(0)
np.random.randint(0, 50257, 4_000_000, dtype=np.uint16).tofile('/tmp/tok50k.bin')"
for b in 16 8; do
  bin=/tmp/gpt2_124m_cuda; [ $b = 8 ] && bin=/tmp/gpt2_124m_b8_cuda
  if $bin --data /tmp/tok50k.bin --steps 8 --log-json "$OUT/gpt2_b$b.jsonl" > "$OUT/gpt2_b$b.txt" 2>&1; then
    python3 -c "
import json,statistics
r=[json.loads(l) for l in open('$OUT/gpt2_b$b.jsonl')][2:]
print('  loomc binary fp32, batch $b: %.0f tokens/s (median of %d steps, %.0f ms/step); %s' % (statistics.median(x['tokens_per_s'] for x in r), len(r), statistics.median(x['step_ms'] for x in r), open('$OUT/gpt2_b$b.txt').read().strip().splitlines()[-1]))"
  else
    echo "  loomc binary fp32, batch $b: failed: $(tail -1 "$OUT/gpt2_b$b.txt")"
  fi
  for p in --fp32 ""; do
    python3 bench/gpt2_torch.py --batch $b --steps 15 $p | python3 -c "
import json,sys; r=json.loads(sys.stdin.read())
print('  %s %s, batch %d: %.0f tokens/s (%.0f ms/step)' % (r['impl'], r['precision'], r['batch'], r['tokens_per_s'], r['step_ms']))"
  done
done
