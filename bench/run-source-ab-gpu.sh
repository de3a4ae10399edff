#!/usr/bin/env bash
# On a GPU host, one call: two generated sources of each model (NAME.base.cpp
# from a base commit's loomc, NAME.new.cpp from this tree's) linked against
# this tree's runtime and run alternately (base new base new), then PyTorch
# beside the new one where a peer is named. A compiler change measured A/B
# with the runtime held fixed (bench/run-driver-ab-gpu.sh holds the source
# fixed instead). With TESTS=1 the runtime's CUDA conformance runs first
# (carry .carry/googletest: cp -r /usr/src/googletest .carry/).
#   here:  bench/gen-source-ab.sh BASE_LOOMC [gpt2] [llama]  (into .carry/source-ab)
#   there: [TESTS=1] [PROFILE=1] [PEERS="gpt2 llama"] [RESUME=gpt2] [STEPS=20] bench/run-source-ab-gpu.sh
# Peers: gpt2 = bench/gpt2_torch.py (eager and torch.compile, vocab 50304,
# 16 x 1024); llama = bench/llama_torch.py (eager and torch.compile, SDPA,
# the Llama-style 1B: 16 layers, d 2048, 8 x 1024). The last table is the
# one to read: ms a step (median of steps 3 on, each run), the largest
# relative loss difference between base and new, tokens/s and MFU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/source-ab}; mkdir -p "$OUT"
SRC=.carry/source-ab
STEPS=${STEPS:-20}
source bench/gpu-runtime.sh
if [ "${TESTS:-0}" = 1 ]; then
  cmake -G Ninja -S bench -B build-tests -DLOOM_BUILD_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest" > "$OUT/cmake.log" 2>&1 &&
    ninja -C build-tests loomrt-tests loomrt_shared > "$OUT/ninja.log" 2>&1 ||
    { echo "build failed"; tail -20 "$OUT/ninja.log"; exit 1; }
  RT=$PWD/build-tests/runtime
else
  build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
fi
for src in "$SRC"/*.cpp; do
  f=$(basename "$src" .cpp)
  c++ -O1 -std=c++17 -I runtime/include "$src" -o "/tmp/$f" -L"$RT" -lloomrt -Wl,-rpath,"$RT" \
    2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
if [ "${TESTS:-0}" = 1 ]; then
  build-tests/runtime/tests/loomrt-tests --gtest_filter='*cuda*:Fused*' > "$OUT/tests.log" 2>&1
  echo "conformance: $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/tests.log" | head
fi
wait
write_tokens 32000 /tmp/tok32k.bin # below every model's vocabulary
for src in "$SRC"/*.new.cpp; do
  name=$(basename "$src" .new.cpp)
  for which in ${ORDER:-base new base new}; do
    [ -x "/tmp/$name.$which" ] || continue
    n=$(ls "$OUT/$name.$which".*.jsonl 2>/dev/null | wc -l)
    "/tmp/$name.$which" --data /tmp/tok32k.bin --steps "$STEPS" --seed 1 \
      --log-json "$OUT/$name.$which.$n.jsonl" > "$OUT/$name.$which.$n.txt" 2>&1 ||
      echo "  $which $name failed: $(tail -2 "$OUT/$name.$which.$n.txt" | tr '\n' ' ')"
  done
done
# RESUME="gpt2 ...": each named model's new binary again over STEPS steps in
# two halves (a checkpoint after STEPS/2, then --resume), its losses against
# its first uninterrupted run's, bit for bit (a CUDA graph captured before
# the checkpoint and again after the resume included).
for name in ${RESUME:-}; do
  [ -x "/tmp/$name.new" ] || continue
  h=$((STEPS / 2)); ck=/tmp/ck-$name; rm -rf "$ck"
  "/tmp/$name.new" --data /tmp/tok32k.bin --steps $h --seed 1 --checkpoint-dir "$ck" \
    --checkpoint-every $h --log-json "$OUT/$name.half1.jsonl" > "$OUT/$name.half1.txt" 2>&1 &&
    "/tmp/$name.new" --data /tmp/tok32k.bin --steps $((STEPS - h)) --seed 1 --checkpoint-dir "$ck" \
      --resume --log-json "$OUT/$name.half2.jsonl" > "$OUT/$name.half2.txt" 2>&1 ||
    echo "  resume $name failed: $(tail -2 "$OUT/$name.half2.txt" "$OUT/$name.half1.txt" | tr '\n' ' ')"
  python3 - "$OUT" "$name" <<'PY'
import json, os, sys
out, name = sys.argv[1:3]
read = lambda f: [json.loads(l)["loss"] for l in open(os.path.join(out, f))]
try:
    whole, halves = read(f"{name}.new.0.jsonl"), read(f"{name}.half1.jsonl") + read(f"{name}.half2.jsonl")
except OSError as e:
    print(f"resume {name}: {e}"); sys.exit()
same = whole == halves
print(f"resume {name}: {len(halves)} steps in two runs against one: "
      + ("bitwise equal" if same else f"DIFFERENT {list(zip(whole, halves))}"))
PY
  rm -rf "$ck"
done
grep -h "captured as a graph\|runs uncaptured" "$OUT"/*.new.0.txt "$OUT"/*.half2.txt 2>/dev/null | sort | uniq -c | head
# PROFILE=1: each binary's kernels through CUPTI (bench/kernel_times.cpp),
# steps 4-8 (a run of 8 less a run of 3), base beside new, kernel by kernel,
# and where the GPU idles (LOOM_KERNEL_GAPS: gaps between kernels by
# length); with LOOMRT_EPILOGUES=report (the shapes cuBLASLt declined).
if [ "${PROFILE:-0}" = 1 ]; then
  build_kernel_times
  for src in "$SRC"/*.new.cpp; do
    name=$(basename "$src" .new.cpp)
    for which in base new; do
      for n in 3 8; do
        LOOMRT_EPILOGUES=report LD_PRELOAD=/tmp/libkt.so LOOM_KERNEL_TIMES="$OUT/$name.$which.k$n.csv" \
          LOOM_KERNEL_GAPS="$OUT/$name.$which.gaps$n.json" \
          "/tmp/$name.$which" --data /tmp/tok32k.bin --steps $n --seed 1 > "$OUT/$name.$which.k$n.txt" 2>&1
      done
      grep "^loomrt: cuBLASLt" "$OUT/$name.$which.k8.txt" | sed "s/^/$name.$which: /" | head -20
      # Where the GPU idles over the second half of the 8-step run's kernels.
      echo "$name.$which idle: $(cat "$OUT/$name.$which.gaps8.json" 2>/dev/null)"
    done
    python3 - "$OUT" "$name" <<'PY'
import csv, os, sys
out, name = sys.argv[1:3]
def per_step(which):
    def read(n):
        p = os.path.join(out, f"{name}.{which}.k{n}.csv")
        return {r[0]: (int(r[1]), int(r[2])) for r in csv.reader(open(p))} if os.path.exists(p) else {}
    a, b = read(3), read(8)
    return {k: ((b[k][1] - a.get(k, (0, 0))[1]) / 5e6, (b[k][0] - a.get(k, (0, 0))[0]) / 5)
            for k in b}
base, new = per_step("base"), per_step("new")
keys = sorted(set(base) | set(new), key=lambda k: -max(base.get(k, (0, 0))[0], new.get(k, (0, 0))[0]))
print(f"{name}: kernel ms a step, base {sum(v[0] for v in base.values()):.2f}, new {sum(v[0] for v in new.values()):.2f}")
print("| kernel | base ms (calls) | new ms (calls) |")
print("|---|---|---|")
for k in keys[:25]:
    b, n = base.get(k, (0, 0)), new.get(k, (0, 0))
    print(f"| {k[:90]} | {b[0]:.2f} ({b[1]:.0f}) | {n[0]:.2f} ({n[1]:.0f}) |")
PY
  done
fi
for peer in ${PEERS:-}; do
  case $peer in
  gpt2) py=bench/gpt2_torch.py; args=(--vocab 50304) ;;
  llama) py=bench/llama_torch.py; args=() ;;
  *) echo "unknown peer $peer"; continue ;;
  esac
  python3 "$py" "${args[@]}" --steps "$STEPS" > "$OUT/${peer}_eager.json" 2> "$OUT/${peer}_eager.err" ||
    echo "$peer eager failed: $(tail -2 "$OUT/${peer}_eager.err")"
  python3 "$py" "${args[@]}" --steps $((STEPS + 5)) --compile > "$OUT/${peer}_compile.json" \
    2> "$OUT/${peer}_compile.err" || echo "$peer compile failed: $(tail -2 "$OUT/${peer}_compile.err")"
done
python3 - "$OUT" "$SRC" <<'PY'
import glob, json, os, statistics, sys
out, src = sys.argv[1:3]
def runs(which, name):
    r = []
    for j in sorted(glob.glob(os.path.join(out, f"{name}.{which}.*.jsonl"))):
        x = [json.loads(l) for l in open(j)]
        if len(x) > 2:
            r.append((statistics.median(s["step_ms"] for s in x[2:]), [s["loss"] for s in x],
                      statistics.median(s["tokens_per_s"] for s in x[2:])))
    return r
def params(name):
    try:
        return int(open(os.path.join(src, name + ".params")).read())
    except (OSError, ValueError):
        return None
print("| model | base ms/step (runs) | new ms/step (runs) | new/base | max rel. loss diff (base-base) | new tokens/s | MFU |")
print("|---|---|---|---|---|---|---|")
rel = lambda a, c: max(abs(x - y) / abs(y) for x, y in zip(a, c))
parts = []
tps = {}
for s in sorted(glob.glob(os.path.join(src, "*.new.cpp"))):
    name = os.path.basename(s)[:-len(".new.cpp")]
    b, n = runs("base", name), runs("new", name)
    if not n:
        print(f"| {name} | | failed | | | | |"); continue
    nm = min(x[0] for x in n); t = max(x[2] for x in n); tps[name] = t
    p = params(name)
    mfu = f"{6 * p * t / 989e12 * 100:.1f}%" if p else "?"
    if b:
        bm = min(x[0] for x in b)
        diff = rel(b[0][1], n[0][1])
        same = f" ({rel(b[0][1], b[1][1]):.2e})" if len(b) > 1 else ""
        # Where the two trajectories part: the first steps' and the last losses.
        parts.append(f"{name} losses base/new: " + ", ".join(
            f"step {k + 1} {b[0][1][k]:.5f}/{n[0][1][k]:.5f}" for k in (0, 1, 4, len(n[0][1]) - 1)
            if k < min(len(b[0][1]), len(n[0][1]))))
        print(f"| {name} | {bm:.1f} ({', '.join(f'{x[0]:.1f}' for x in b)}) | {nm:.1f} "
              f"({', '.join(f'{x[0]:.1f}' for x in n)}) | {nm / bm:.3f} | {diff:.2e}{same} | {t / 1e3:.1f}k | {mfu} |")
    else:
        print(f"| {name} | | {nm:.1f} | | | {t / 1e3:.1f}k | {mfu} |")
if parts:
    print()
    print("\n".join(parts))
peers = []
for f in sorted(glob.glob(os.path.join(out, "*_eager.json")) + glob.glob(os.path.join(out, "*_compile.json"))):
    try:
        d = json.loads(open(f).read().strip().splitlines()[-1])
    except Exception:
        continue
    peer = os.path.basename(f).split("_")[0]
    t = d.get("tokens_per_s") or d["batch"] * d["seq"] / (d["ms_per_step"] / 1e3)
    mine = next((v for k, v in tps.items() if k.startswith(peer)), None)
    peers.append((peer, d.get("impl", os.path.basename(f)), t, mine))
if peers:
    print()
    print("| peer | implementation | tokens/s | Loom (new) / it |")
    print("|---|---|---|---|")
    for peer, impl, t, mine in peers:
        print(f"| {peer} | {impl} | {t / 1e3:.1f}k | {mine / t:.3f}x |" if mine else f"| {peer} | {impl} | {t / 1e3:.1f}k | |")
PY
