#!/usr/bin/env bash
# On a GPU host: the fused attention kernels (runtime/cuda/flash_attention.cu)
# of this tree against a base commit's and against PyTorch's SDPA, in one
# call. The runtime's CUDA conformance tests run first (the attention ones
# hold the kernels to a float64 reference); then loomrt_bench attention with
# each runtime and bench/attention_torch.py; the table is printed last.
#   here:   mkdir -p .carry/attn-ab/base &&
#           git archive BASE runtime cmake bench include tools/loom-calibrate tools/loom-graphgen | tar -x -C .carry/attn-ab/base &&
#           cp bench/loomrt_bench.cpp .carry/attn-ab/base/bench/   (the timing code of this tree)
#   there:  bench/run-attention-gpu.sh    (carry .carry/attn-ab and .carry/googletest)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=/tmp/attn-ab
mkdir -p "$OUT"
build() { # SOURCE_ROOT BUILD_DIR TESTS TARGETS...
  local src=$1 dir=$2 tests=$3
  shift 3
  cmake -G Ninja -S "$src/bench" -B "$dir" -DLOOM_BUILD_TESTS="$tests" \
    -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest" > "$OUT/cmake-$(basename "$dir").log" 2>&1 &&
    ninja -C "$dir" "$@" > "$OUT/ninja-$(basename "$dir").log" 2>&1 ||
    { echo "build of $src failed"; tail -20 "$OUT/ninja-$(basename "$dir").log"; exit 1; }
}
build .carry/attn-ab/base "$PWD/build-attn-base" OFF loomrt_bench &
build "$PWD" "$PWD/build-tests" ON loomrt_bench loomrt-tests &
wait
build-tests/runtime/tests/loomrt-tests --gtest_filter='*cuda*:Plan*' > "$OUT/tests.txt" 2>&1
echo "conformance (CUDA): $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/tests.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$OUT/tests.txt" | head -20
for which in base new; do
  dir=build-tests; [ $which = base ] && dir=build-attn-base
  "$dir/bin/loomrt_bench" attention --backend cuda --iters 20 > "$OUT/$which.jsonl" 2> "$OUT/$which.err" ||
    echo "loomrt_bench ($which) failed: $(tail -2 "$OUT/$which.err")"
done
python3 bench/attention_torch.py --iters 20 > "$OUT/torch.jsonl" 2> "$OUT/torch.err" ||
  echo "attention_torch.py failed: $(tail -2 "$OUT/torch.err")"
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name + ".jsonl")
    rows = [json.loads(l) for l in open(p)] if os.path.exists(p) else []
    return {(r["shape"], r["causal"]): r for r in rows}
base, new, torch = load("base"), load("new"), load("torch")
print("| shape | causal | pass | base ms | new ms | new/base | SDPA ms (kernel) | new/SDPA | new TFLOP/s |")
print("|---|---|---|---|---|---|---|---|---|")
for key in sorted(new, key=lambda k: (k[0] != "gpt2", -k[1])):
    n = new[key]
    label = f'{n["shape"]} {n["batch"]}x{n["heads"]}x{n["t"]}x{n["dh"]}'
    for p in ("fwd", "bwd"):
        b, t = base.get(key), torch.get(key)
        bm = f'{b[p + "_ms"]:.3f}' if b else "-"
        ratio = f'{n[p + "_ms"] / b[p + "_ms"]:.2f}' if b else "-"
        tm = f'{t[p + "_ms"]:.3f} ({t["kernel"]})' if t else "-"
        tr = f'{n[p + "_ms"] / t[p + "_ms"]:.2f}' if t else "-"
        print(f'| {label} | {key[1]} | {p} | {bm} | {n[p + "_ms"]:.3f} | {ratio} | {tm} | {tr} | {n[p + "_tflops"]} |')
PY
