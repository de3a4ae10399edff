#!/usr/bin/env bash
# On a GPU host: two generated sources of one model, NAME.base.cpp (the
# commit before a compiler change) and NAME.new.cpp (after it), carried in
# .carry/source-ab, linked against this tree's runtime and run alternately
# (base new base new base new) in one call: median step times and whether
# the losses agree, one table row per model.
#   here:  loomc(base) ... -o .carry/source-ab/NAME.base.cpp
#          loomc(new)  ... -o .carry/source-ab/NAME.new.cpp
#   there: bench/run-source-ab-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=/tmp/source-ab; mkdir -p "$OUT"
SRC=.carry/source-ab
STEPS=${STEPS:-20}
source bench/gpu-runtime.sh
build_runtime
write_tokens 32000 /tmp/tok32k.bin
for src in "$SRC"/*.cpp; do
  f=$(basename "$src" .cpp)
  link_binary "$src" "/tmp/$f" -O1 2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
wait
for m in $(ls "$SRC" | sed -n 's/\.base\.cpp$//p'); do
  for i in 1 2 3; do
    for which in base new; do
      /tmp/$m.$which --data /tmp/tok32k.bin --steps "$STEPS" --seed 1 \
        --log-json "$OUT/$m.$which.$i.jsonl" > "$OUT/$m.$which.$i.txt" 2>&1 ||
        echo "  $m $which failed: $(tail -2 "$OUT/$m.$which.$i.txt" | tr '\n' ' ')"
    done
  done
done
python3 - "$OUT" $(ls "$SRC" | sed -n 's/\.base\.cpp$//p') <<'PY'
import glob, json, os, statistics, sys
out, models = sys.argv[1], sys.argv[2:]
print("| model | base ms/step (runs) | new ms/step (runs) | new/base | base tok/s | new tok/s | losses (max rel. diff) |")
print("|---|---|---|---|---|---|---|")
for m in models:
    runs = {}
    for which in ("base", "new"):
        runs[which] = []
        for j in sorted(glob.glob(os.path.join(out, f"{m}.{which}.*.jsonl"))):
            r = [json.loads(l) for l in open(j)]
            runs[which].append((statistics.median(x["step_ms"] for x in r[2:]),
                                statistics.median(x["tokens_per_s"] for x in r[2:]),
                                [x["loss"] for x in r]))
    if not runs["base"] or not runs["new"]:
        print(f"| {m} | missing | | | | | |")
        continue
    b = statistics.median(x[0] for x in runs["base"]); n = statistics.median(x[0] for x in runs["new"])
    bt = statistics.median(x[1] for x in runs["base"]); nt = statistics.median(x[1] for x in runs["new"])
    lb, ln = runs["base"][0][2], runs["new"][0][2]
    diff = max(abs(a - c) / max(abs(a), 1e-12) for a, c in zip(lb, ln))
    fmt = lambda rs: ", ".join("%.1f" % x[0] for x in rs)
    print(f"| {m} | {b:.1f} ({fmt(runs['base'])}) | {n:.1f} ({fmt(runs['new'])}) | {n / b:.3f} | "
          f"{bt / 1e3:.1f}k | {nt / 1e3:.1f}k | {'bitwise equal' if diff == 0 else '%.2e' % diff} |")
PY
