#!/usr/bin/env bash
# On a GPU host: the mixture-of-experts generator checked on CUDA (issue
# 52), from bench/gen-moe-gpu.sh's .carry/moe. Builds the runtime and its
# tests, runs the MoE kernel conformance tests (CUDA, fp32 and bf16, against
# float64 references and the CPU kernels), Hugging Face's
# MixtralForCausalLM on the exported weights (bench/moe_hf_check.py, beside
# the build), and 20 steps of three CUDA binaries of the same models beside
# the CPU binaries' losses: fp32 dropless, fp32 with capacity 1.25 (each
# within 1e-4 relative), bf16 dropless (within 2e-2 of fp32). Prints a table
# last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/moe
source bench/gpu-runtime.sh
python3 bench/moe_hf_check.py "$GEN/hf" "$GEN/gpl3.bin" > "$OUT/hf.txt" 2>&1 &
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLOOM_GTEST_SOURCE_DIR="$PWD/$GEN/googletest"
ninja -C build-bench loomrt-tests > "$OUT/ninja-tests.log" 2>&1 || tail -5 "$OUT/ninja-tests.log"
for f in moe-cuda moe-cuda-cap moe-cuda-bf16; do
  link_binary "$GEN/$f.cpp" "/tmp/$f" -O1 2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
T=$(find build-bench -name loomrt-tests -type f | head -1)
$T --gtest_filter='*Moe*' > "$OUT/gtest.txt" 2>&1
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|OK \]|FAILED \]" "$OUT/gtest.txt" | tail -12
wait
for f in moe-cuda moe-cuda-cap moe-cuda-bf16; do
  rm -f "$OUT/$f.jsonl"
  "/tmp/$f" --data "$GEN/gpl3.bin" --steps 20 --log-json "$OUT/$f.jsonl" > "$OUT/$f.log" 2>&1 ||
    { echo "$f failed:"; tail -3 "$OUT/$f.log"; }
done
wait # (the Hugging Face check too)
tail -3 "$OUT/hf.txt"
python3 - "$OUT" "$GEN" <<'PY'
import json, sys
out, gen = sys.argv[1:]
load = lambda p: [json.loads(l) for l in open(p)] if __import__("os").path.exists(p) else []
print("| run | mean step (6-20) | last loss | reference | max rel. loss diff | bound |")
print("|---|---|---|---|---|---|")
for name, ref, bound in (("moe-cuda", "cpu", 1e-4), ("moe-cuda-cap", "cpu-cap", 1e-4),
                         ("moe-cuda-bf16", "cpu", 2e-2)):
    r, c = load(f"{out}/{name}.jsonl"), load(f"{gen}/{ref}.json")
    if len(r) != 20 or len(c) != 20:
        print(f"| {name} | failed | | {ref} | | |")
        continue
    d = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(r, c))
    ms = sum(x["step_ms"] for x in r[5:]) / 15
    print(f"| {name} | {ms:.2f} ms | {r[-1]['loss']:.5f} | CPU {c[-1]['loss']:.5f} | {d:.1e} | "
          f"{bound:g} {'ok' if d <= bound else 'FAILED'} |")
PY
