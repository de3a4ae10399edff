#!/usr/bin/env bash
# On a GPU host: the optimizer-offload schedules (loomc --optimizer-offload)
# on sources from bench/gen-gpu-sources.sh (.carry/gen): a small GPT with the
# optimizer on the GPU and on the CPU against the CPU binary (losses), and
# GPT-2 124M (bf16, batch 8) step time in each mode.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/gen
cmake -G Ninja -S bench -B build-bench > "$OUT/cmake.log" 2>&1 &&
  ninja -C build-bench > "$OUT/ninja.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/ninja.log"; exit 1; }
RT="$PWD/build-bench/runtime"
for f in off_small_none_cuda off_small_cpu_cuda off_small_static0.5_cuda off_small_interleaved_cuda \
         off_gpt2_none_cuda off_gpt2_cpu_cuda off_gpt2_static0.5_cuda off_gpt2_interleaved_cuda \
         off_small_mixed_fp32_cuda off_small_mixed_bf16_cuda small_bf16_cuda small_cpu; do
  { c++ -O2 -std=c++17 -I runtime/include "$GEN/$f.cpp" -o "/tmp/$f" -L"$RT" -lloomrt \
      -Wl,-rpath,"$RT" 2> "$OUT/$f.compile.log" || echo "compiling $f failed"; } &
done
wait
echo "== small GPT, 20 steps: optimizer on the GPU / on the CPU (offload) vs the CPU binary"
for f in small_cpu off_small_none_cuda off_small_cpu_cuda off_small_static0.5_cuda \
         off_small_interleaved_cuda off_small_mixed_fp32_cuda off_small_mixed_bf16_cuda small_bf16_cuda; do
  /tmp/$f --data "$GEN/gpl3.bin" --steps 20 --seed 1 --log-json "$OUT/$f.jsonl" > "$OUT/$f.txt" 2>&1 ||
    echo "  $f failed: $(tail -1 "$OUT/$f.txt")"
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
ref = [json.loads(l)["loss"] for l in open(f"{out}/small_cpu.jsonl")]
for f in ("off_small_none_cuda", "off_small_cpu_cuda", "off_small_static0.5_cuda",
          "off_small_interleaved_cuda", "off_small_mixed_fp32_cuda"):
    got = [json.loads(l)["loss"] for l in open(f"{out}/{f}.jsonl")]
    err = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    print(f"  {f:26} {got[0]:.5f} -> {got[-1]:.5f}; max relative difference vs CPU binary {err:.2e}")
# bf16: subgroups on the GPU, streamed and on the CPU (bf16 gradients, fused
# bf16 refresh) against the same model with the optimizer on the GPU.
ref = [json.loads(l)["loss"] for l in open(f"{out}/small_bf16_cuda.jsonl")]
got = [json.loads(l)["loss"] for l in open(f"{out}/off_small_mixed_bf16_cuda.jsonl")]
err = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
print(f"  {'off_small_mixed_bf16_cuda':26} {got[0]:.5f} -> {got[-1]:.5f}; max relative difference vs bf16 on-device optimizer {err:.2e}")
PY
echo "== GPT-2 124M bf16, batch 8 x 1024: step time by optimizer placement"
source bench/gpu-runtime.sh # write_tokens
write_tokens 50257 "/tmp/tok50k.bin"
for m in none cpu static0.5 interleaved; do
  /tmp/off_gpt2_${m}_cuda --data /tmp/tok50k.bin --steps 8 --log-json "$OUT/off_gpt2_$m.jsonl" \
    > "$OUT/off_gpt2_$m.txt" 2>&1 || echo "  $m failed: $(tail -1 "$OUT/off_gpt2_$m.txt")"
  python3 -c "
import json,statistics; r=[json.loads(l) for l in open('$OUT/off_gpt2_$m.jsonl')][2:]
print('  --optimizer-offload=$m: %.1f ms/step, %.0f tokens/s; %s' % (statistics.median(x['step_ms'] for x in r), statistics.median(x['tokens_per_s'] for x in r), '; '.join(l for l in open('$OUT/off_gpt2_$m.txt').read().splitlines() if 'memory' in l)))"
done
