#!/usr/bin/env bash
# On a GPU host: builds the runtime, compiles training binaries that loomc
# generated on the development machine (carried in .carry/gen), checks the
# CUDA binary against the CPU binary on a small GPT, and measures GPT-2
# 124M-shaped training throughput beside PyTorch eager in the same run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/gen
cmake -G Ninja -S bench -B build-bench -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest" >/dev/null &&
  ninja -C build-bench >/dev/null || { echo "runtime build failed"; exit 1; }
RT="$PWD/build-bench/runtime"
for f in small_cuda small_cpu gpt2_124m_cuda gpt2_124m_b8_cuda; do
  c++ -O2 -std=c++17 -I runtime/include "$GEN/$f.cpp" -o "/tmp/$f" -L"$RT" -lloomrt \
    -Wl,-rpath,"$RT" 2> "$OUT/$f.compile.log" || echo "compiling $f failed (see $f.compile.log)"
done

echo "== small GPT: CUDA binary against the CPU binary (20 steps, same seed and data)"
/tmp/small_cuda --data "$GEN/gpl3.bin" --steps 20 --seed 1 --log-json "$OUT/small_cuda.jsonl" > /dev/null
/tmp/small_cpu --data "$GEN/gpl3.bin" --steps 20 --seed 1 --log-json "$OUT/small_cpu.jsonl" > /dev/null
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
g = [json.loads(l)["loss"] for l in open(f"{out}/small_cuda.jsonl")]
c = [json.loads(l)["loss"] for l in open(f"{out}/small_cpu.jsonl")]
err = max(abs(a - b) / abs(b) for a, b in zip(g, c))
print(f"  losses {c[0]:.5f} -> {c[-1]:.5f}; max relative difference CUDA vs CPU: {err:.2e} over {len(g)} steps")
PY

echo "== GPT-2 124M shape (12 x 768, vocab 50257, seq 1024): tokens/s"
python3 -c "
import numpy as np; np.random.seed(0)
np.random.randint(0, 50257, 4_000_000, dtype=np.uint16).tofile('/tmp/tok50k.bin')"
for b in 16 8; do
  bin=/tmp/gpt2_124m_cuda; [ $b = 8 ] && bin=/tmp/gpt2_124m_b8_cuda
  if $bin --data /tmp/tok50k.bin --steps 6 --log-json "$OUT/gpt2_b$b.jsonl" > "$OUT/gpt2_b$b.txt" 2>&1; then
    python3 -c "
import json,statistics
r=[json.loads(l) for l in open('$OUT/gpt2_b$b.jsonl')][2:]
print('  loomc binary fp32, batch $b: %.0f tokens/s (median of %d steps, %.0f ms/step)' % (statistics.median(x['tokens_per_s'] for x in r), len(r), statistics.median(x['step_ms'] for x in r)))"
  else
    echo "  loomc binary fp32, batch $b: failed: $(tail -1 "$OUT/gpt2_b$b.txt")"
  fi
  python3 bench/gpt2_torch.py --batch $b --steps 15 | python3 -c "
import json,sys; r=json.loads(sys.stdin.read())
print('  %s bf16, batch %d: %.0f tokens/s (%.0f ms/step)' % (r['impl'], r['batch'], r['tokens_per_s'], r['step_ms']))"
done
