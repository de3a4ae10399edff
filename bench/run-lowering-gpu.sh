#!/usr/bin/env bash
# On the H100 host: the loomrt lowering against the commit before it, in one
# call. Each model of bench/gen-lowering-gpu.sh is compiled as each loomc
# would compile it (the base at -O2, the new one at -O0, as loomc now
# does), run for a few steps, and the median step times are set side by
# side: GPT-2 124M tokens/s must stay within 2%, the 5B offload modes'
# steps within 3%.
#   MODELS="5b_static0.5" ORDER="new base newO2 new base" bench/run-lowering-gpu.sh
# runs the binaries in that order (newO2: the new source at -O2, to tell the
# host compiler's part from the IR's) and prints every run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
SRC=.carry/lower
cmake -G Ninja -S bench -B build-bench > "$OUT/cmake.log" 2>&1 &&
  ninja -C build-bench > "$OUT/ninja.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/ninja.log"; exit 1; }
RT="$PWD/build-bench/runtime"
MODELS="${MODELS:-gpt2_bf16 5b_cpu 5b_static0.5 5b_interleaved}"
ORDER="${ORDER:-base new}"
for which in $(echo $ORDER | tr ' ' '\n' | sort -u); do
  opt=-O0; [ $which != new ] && opt=-O2
  for f in $MODELS; do
    { gunzip -c "$SRC/${which%O2}/$f.cpp.gz" > "/tmp/${which}_$f.cpp" &&
      /usr/bin/time -f "%e" -o "$OUT/${which}_$f.cxx_s" c++ $opt -std=c++17 -I runtime/include \
        "/tmp/${which}_$f.cpp" -o "/tmp/${which}_$f" -L"$RT" -lloomrt -Wl,-rpath,"$RT" \
        2> "$OUT/${which}_$f.compile.log" || echo "compiling ${which} $f failed"; } &
  done
done
wait
source bench/gpu-runtime.sh # write_tokens
write_tokens 32000 "/tmp/tok32k.bin"
for f in $MODELS; do
  steps=6; [ $f = gpt2_bf16 ] && steps=12
  for which in $ORDER; do
    rm -f "$OUT/${which}_$f.jsonl"
    /tmp/${which}_$f --data /tmp/tok32k.bin --steps $steps --seed 1 --log-json "$OUT/${which}_$f.jsonl" \
      > "$OUT/${which}_$f.txt" 2>&1 || echo "  ${which} $f failed: $(tail -2 "$OUT/${which}_$f.txt" | tr '\n' ' ')"
    python3 -c "
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1])]
print('  %-6s %-15s steps (ms): %s; median of 3-: %.1f' % (sys.argv[2], sys.argv[3],
      ' '.join('%.0f' % x['step_ms'] for x in r), statistics.median(x['step_ms'] for x in r[2:])))
" "$OUT/${which}_$f.jsonl" "$which" "$f" 2>/dev/null
  done
done
python3 - "$OUT" $MODELS <<'PY'
import json, statistics, sys
out, models = sys.argv[1], sys.argv[2:]
print(f"{'model':15} {'base ms':>8} {'new ms':>8} {'new/base':>8} {'base tok/s':>11} {'new tok/s':>10} {'loss equal':>10} {'c++ s base/new':>15}")
for m in models:
    row = {}
    for w in ("base", "new"):
        try:
            r = [json.loads(l) for l in open(f"{out}/{w}_{m}.jsonl")]
            row[w] = (statistics.median(x["step_ms"] for x in r[2:]),
                      statistics.median(x["tokens_per_s"] for x in r[2:]), [x["loss"] for x in r],
                      open(f"{out}/{w}_{m}.cxx_s").read().strip())
        except Exception as e:
            row[w] = None
    if not row["base"] or not row["new"]:
        print(f"{m:15} missing a run"); continue
    b, n = row["base"], row["new"]
    print(f"{m:15} {b[0]:8.1f} {n[0]:8.1f} {n[0]/b[0]:8.3f} {b[1]:11.0f} {n[1]:10.0f} {str(b[2] == n[2]):>10} {b[3]:>7}/{n[3]}")
PY
