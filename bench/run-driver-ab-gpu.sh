#!/usr/bin/env bash
# On a GPU host: the training driver (runtime/driver/train_main.cpp) of this
# tree against the one of a base commit, with the same generated sources
# linked against each runtime, run alternately (base new base new) in one
# call: step times and losses side by side. A change to the driver alone
# must leave both unchanged (tokens/s within 2%, losses equal).
#   here:   mkdir -p .carry/driver-ab/base &&
#           git archive BASE runtime cmake bench include tools/loom-calibrate tools/loom-graphgen | tar -x -C .carry/driver-ab/base
#           loomc ... --compile-to=cpp -o .carry/driver-ab/NAME.cpp   (each model)
#   there:  bench/run-driver-ab-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu-runtime.sh
# Per-run logs stay on the host (/tmp/driver-ab); the table is printed.
OUT=/tmp/driver-ab
mkdir -p "$OUT"
SRC=.carry/driver-ab
STEPS=${STEPS:-20}
build() { # SOURCE_ROOT BUILD_DIR
  cmake -G Ninja -S "$1/bench" -B "$2" -DLOOM_BUILD_TESTS=OFF > "$OUT/cmake-$(basename "$2").log" 2>&1 &&
    ninja -C "$2" loomrt_shared > "$OUT/ninja-$(basename "$2").log" 2>&1 ||
    { echo "build of $1 failed"; tail -20 "$OUT/ninja-$(basename "$2").log"; exit 1; }
}
build "$SRC/base" "$PWD/build-base" &
build "$PWD" "$PWD/build-bench" &
wait
write_tokens 32000 "/tmp/tok32k.bin"
for src in "$SRC"/*.cpp; do
  f=$(basename "$src" .cpp)
  for which in base new; do
    rt="$PWD/build-bench/runtime"; [ $which = base ] && rt="$PWD/build-base/runtime"
    c++ -O1 -std=c++17 -I runtime/include "$src" -o "/tmp/${which}_$f" -L"$rt" -lloomrt \
      -Wl,-rpath,"$rt" 2> "$OUT/${which}_$f.compile.log" || echo "compiling $which $f failed" &
  done
done
wait
for src in "$SRC"/*.cpp; do
  f=$(basename "$src" .cpp)
  for which in ${ORDER:-base new base new}; do
    n=$(ls "$OUT/${which}_$f".*.jsonl 2>/dev/null | wc -l)
    /tmp/${which}_$f --data /tmp/tok32k.bin --steps "$STEPS" --seed 1 \
      --log-json "$OUT/${which}_$f.$n.jsonl" > "$OUT/${which}_$f.$n.txt" 2>&1 ||
      echo "  $which $f failed: $(tail -2 "$OUT/${which}_$f.$n.txt" | tr '\n' ' ')"
  done
done
python3 - "$OUT" "$SRC" <<'PY'
import glob, json, os, statistics, sys
out, src = sys.argv[1:3]
print("| model | base ms/step (runs) | new ms/step (runs) | new/base | losses |")
print("|---|---|---|---|---|")
for s in sorted(glob.glob(os.path.join(src, "*.cpp"))):
    f = os.path.basename(s)[:-4]
    runs = {}
    for which in ("base", "new"):
        runs[which] = []
        for j in sorted(glob.glob(os.path.join(out, f"{which}_{f}.*.jsonl"))):
            r = [json.loads(l) for l in open(j)]
            runs[which].append((statistics.median(x["step_ms"] for x in r[2:]),
                                [x["loss"] for x in r]))
    if not runs["base"] or not runs["new"]:
        print(f"| {f} | missing | | | |")
        continue
    b = statistics.median(m for m, _ in runs["base"])
    n = statistics.median(m for m, _ in runs["new"])
    same = all(l == runs["base"][0][1] for _, l in runs["base"] + runs["new"])
    fmt = lambda rs: ", ".join("%.1f" % m for m, _ in rs)
    # Where they differ: the largest relative difference of a step's loss
    # between the first base and the first new run.
    lb, ln = runs["base"][0][1], runs["new"][0][1]
    worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(lb, ln))
    verdict = "bitwise equal" if same else f"max rel. diff {worst:.2e}"
    print(f"| {f} | {b:.1f} ({fmt(runs['base'])}) | {n:.1f} ({fmt(runs['new'])}) | "
          f"{n / b:.3f} | {verdict} |")
PY
