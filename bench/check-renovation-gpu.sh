#!/usr/bin/env bash
# On a GPU host: the renovation of issue 42 changes no number. The runtime
# of this tree and the one before the renovation (0137c55, carried in
# .carry/old) are built side by side; the runtime's CUDA tests run on the
# new one; the same generated sources (loomc here, .carry/renov: GPT-2 124M
# bf16 fused, a Llama bf16, an offloaded GPT with the host thread, an
# unfused GPT on the online arena) are linked against each and trained 20
# steps from one seed. Every loss must be bitwise equal. Prints a table.
#   here:  the loomc commands in bench/RESULTS.md (2026-11-28, renovation)
#   there: bench/check-renovation-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu-runtime.sh
OUT="${OUT:-/tmp/renovation}"
mkdir -p "$OUT"
GT=(-DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest" -DCMAKE_CUDA_ARCHITECTURES=90)
build() { # SRC_ROOT BUILD_DIR TARGETS...
  local src=$1 dir=$2
  shift 2
  cmake -G Ninja -S "$src/bench" -B "$dir" "${GT[@]}" > "$OUT/$(basename "$dir").cmake.log" 2>&1 &&
    ninja -C "$dir" "$@" > "$OUT/$(basename "$dir").ninja.log" 2>&1 ||
    { echo "build of $src failed"; tail -20 "$OUT/$(basename "$dir").ninja.log"; exit 1; }
}
build . build-new loomrt_shared loomrt-tests &
build .carry/old build-old loomrt_shared &
wait
T=$(find build-new -name loomrt-tests -type f | head -1)
echo "runtime tests (new runtime, CUDA and CPU):"
$T --gtest_brief=1 2>&1 | tail -3
write_tokens 32000 "$OUT/tok.bin"
printf '| model | steps | losses equal | last loss (new) | ms/step new | ms/step old |\n|---|---|---|---|---|---|\n'
for m in gpt2 llama offload unfused; do
  for side in new old; do
    rt="$PWD/build-$side/runtime"
    c++ -O1 -std=c++17 -I "$([ $side = new ] && echo runtime/include || echo .carry/old/runtime/include)" \
      ".carry/renov/$m.cpp" -o "$OUT/${m}_$side" -L"$rt" -lloomrt -Wl,-rpath,"$rt" \
      2> "$OUT/${m}_$side.compile.log" || { echo "$m ($side): compile failed"; tail -3 "$OUT/${m}_$side.compile.log"; }
    "$OUT/${m}_$side" --data "$OUT/tok.bin" --steps 20 --seed 1 --log-json "$OUT/${m}_$side.jsonl" \
      > "$OUT/${m}_$side.txt" 2>&1 || echo "$m ($side) failed: $(tail -2 "$OUT/${m}_$side.txt")"
  done
  python3 - "$OUT" "$m" <<'PY'
import json, statistics, sys
out, m = sys.argv[1], sys.argv[2]
def read(side):
    try:
        return [json.loads(l) for l in open(f"{out}/{m}_{side}.jsonl")]
    except OSError:
        return []
new, old = read("new"), read("old")
same = bool(new) and [r["loss"] for r in new] == [r["loss"] for r in old]
ms = lambda r: statistics.median(x["step_ms"] for x in r[2:]) if len(r) > 2 else float("nan")
print(f"| {m} | {len(new)} | {'yes' if same else 'NO'} | {new[-1]['loss'] if new else float('nan'):.6f} "
      f"| {ms(new):.1f} | {ms(old):.1f} |")
PY
done
