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
  { c++ -O2 -std=c++17 -I runtime/include "$src" -o "/tmp/$f" -L"$RT" -lloomrt \
      -Wl,-rpath,"$RT" 2> "$OUT/$f.compile.log" || echo "compiling $f failed (see $f.compile.log)"; } &
done
wait

echo "== CUDA binaries (fp32 and --precision=bf16) against the fp32 CPU binary (20 steps, same seed, weights and data)"
for m in small onnx_gpt onnx_llama; do
  for t in cpu cuda bf16_cuda; do
    w=(); [ -f "$GEN/${m}_$t.cpp.weights.safetensors" ] && w=(--weights "$GEN/${m}_$t.cpp.weights.safetensors")
    /tmp/${m}_$t --data "$GEN/gpl3.bin" --steps 20 --seed 1 "${w[@]}" --log-json "$OUT/${m}_$t.jsonl" \
      > "$OUT/${m}_$t.txt" 2>&1 || echo "  $m $t failed: $(tail -1 "$OUT/${m}_$t.txt")"
  done
  python3 - "$OUT" "$m" <<'PY'
import json, sys
out, m = sys.argv[1:]
c = [json.loads(l)["loss"] for l in open(f"{out}/{m}_cpu.jsonl")]
for t, tol in (("cuda", "1e-5"), ("bf16_cuda", "1e-2")):
    g = [json.loads(l)["loss"] for l in open(f"{out}/{m}_{t}.jsonl")]
    err = max(abs(a - b) / abs(b) for a, b in zip(g, c))
    print(f"  {m:10} {t:9} losses {g[0]:.5f} -> {g[-1]:.5f}; max relative difference vs CPU fp32: "
          f"{err:.2e} over {len(g)} steps (bound {tol})")
PY
done

echo "== GPT-2 124M shape (12 x 768, vocab 50257, seq 1024): tokens/s"
source bench/gpu-runtime.sh # write_tokens
write_tokens 50257 "/tmp/tok50k.bin"
for b in 16 8; do
  for p in bf16 fp32; do
    bin=/tmp/gpt2_124m_b${b}_cuda; [ $p = bf16 ] && bin=/tmp/gpt2_124m_b${b}_bf16_cuda
    if $bin --data /tmp/tok50k.bin --steps 8 --log-json "$OUT/gpt2_b${b}_$p.jsonl" > "$OUT/gpt2_b${b}_$p.txt" 2>&1; then
      python3 -c "
import json,statistics
r=[json.loads(l) for l in open('$OUT/gpt2_b${b}_$p.jsonl')][2:]
print('  loomc binary $p, batch $b: %.0f tokens/s (median of %d steps, %.0f ms/step); %s' % (statistics.median(x['tokens_per_s'] for x in r), len(r), statistics.median(x['step_ms'] for x in r), open('$OUT/gpt2_b${b}_$p.txt').read().strip().splitlines()[-1]))"
    else
      echo "  loomc binary $p, batch $b: failed: $(tail -1 "$OUT/gpt2_b${b}_$p.txt")"
    fi
  done
  [ "${TORCH_B8:-0}" = 1 ] || [ $b = 16 ] || continue
  for p in --fp32 ""; do
    python3 bench/gpt2_torch.py --batch $b --steps 15 $p | python3 -c "
import json,sys; r=json.loads(sys.stdin.read())
print('  %s %s, batch %d: %.0f tokens/s (%.0f ms/step)' % (r['impl'], r['precision'], r['batch'], r['tokens_per_s'], r['step_ms']))"
  done
done

# Kernel time of one batch-8 bf16 step by kernel name (PROFILE=1; ncu ships
# with the CUDA toolkit).
if [ "${PROFILE:-0}" = 1 ] && command -v ${NCU:=/usr/local/cuda/bin/ncu} >/dev/null; then
  $NCU --csv --metrics gpu__time_duration.sum /tmp/gpt2_124m_b8_bf16_cuda --data /tmp/tok50k.bin \
    --steps 1 > "$OUT/ncu_b8_bf16.csv" 2> "$OUT/ncu.err"
  python3 - "$OUT/ncu_b8_bf16.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; k, v, u = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}
t, n = collections.Counter(), collections.Counter()
for r in rows[1:]:
    name = r[k].replace("(anonymous namespace)::", "").replace("void ", "").split("(")[0][:70]
    t[name] += float(r[v].replace(",", "")) * scale[r[u]]; n[name] += 1
print(f"== ncu, one bf16 batch-8 step: {sum(t.values()):.1f} ms of kernels, {sum(n.values())} launches")
for name, ms in t.most_common(14):
    print(f"  {ms:8.2f} ms {n[name]:5d}x {name}")
PY
fi
