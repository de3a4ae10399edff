#!/usr/bin/env bash
# Checkpoints on GPUs (issue 14's runtime work on CUDA and NCCL): the
# runtime's conformance tests, then on 1 GPU and on 2 ranks over NCCL (ZeRO 1
# and 3): 6 straight steps against 3 steps, a checkpoint and 3 resumed steps,
# the manifest and parts on disk, and a corrupted part refused on resume.
# GPU steps are not bitwise repeatable (atomic adds in the embedding
# gradient), so the resumed losses are compared with a second straight run's
# difference beside them: resuming must add nothing to that noise.
#   bench/run-checkpoint-gpu.sh gen    # on the development machine: loomc
#                                      # writes the sources into .carry/ckpt
#   bench/run-checkpoint-gpu.sh        # on a 2-GPU host (carry .carry)
set -uo pipefail
cd "$(dirname "$0")/.."
GEN=.carry/ckpt
small=gpt:layers=2,d_model=64,heads=4,vocab=256,seq=32,batch=8
if [ "${1:-}" = gen ]; then
  BIN="${2:-build}/bin"
  mkdir -p "$GEN"
  python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 "$GEN/gpl3.bin" > /dev/null
  "$BIN/loomc" --model "$small" --target=cuda --compile-to=cpp -o "$GEN/ck_1gpu.cpp"
  for z in 1 3; do
    "$BIN/loomc" --model "$small" --target=cuda --topology=gpu=2 --zero-stage=$z \
      --compile-to=cpp -o "$GEN/ck_z${z}.cpp"
  done
  [ -d .carry/googletest ] || cp -r /usr/src/googletest .carry/googletest
  exit 0
fi
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
NCCL_ROOT=$(python3 -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])")
cmake -G Ninja -S bench -B build-bench -DLOOMRT_NCCL_ROOT="$NCCL_ROOT" \
  -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest" > "$OUT/cmake.log" 2>&1 &&
  ninja -C build-bench > "$OUT/ninja.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/ninja.log"; exit 1; }
RT="$PWD/build-bench/runtime"
for f in ck_1gpu ck_z1 ck_z3; do
  c++ -O2 -std=c++17 -I runtime/include "$GEN/$f.cpp" -o "/tmp/$f" -L"$RT" -lloomrt \
    -Wl,-rpath,"$RT" 2> "$OUT/$f.compile.log" || echo "compiling $f failed"
done
echo "== runtime conformance tests (CPU and CUDA backends)"
build-bench/runtime/tests/loomrt-tests > "$OUT/tests.log" 2>&1
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$OUT/tests.log" | head -12

port=29700
source bench/launch.sh
# maxrel A B: the largest relative difference of two logs' losses, step by step.
maxrel() {
  python3 -c "
import json, sys
a, b = ([json.loads(l)['loss'] for l in open(p)] for p in sys.argv[1:3])
print('%.1e' % max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) == 6 else 'MISSING')" "$1" "$2"
}

echo "== checkpoint and resume"
printf "%-9s %-6s %-15s %-15s %-28s %s\n" binary ranks "resumed vs run" "run vs run" "files" "corrupt part"
for f in ck_1gpu ck_z1 ck_z3; do
  n=2; [ $f = ck_1gpu ] && n=1
  ck="$OUT/$f.ck"; rm -rf "$ck" "$OUT"/$f.*.jsonl
  common=(--data "$GEN/gpl3.bin" --seed 3)
  launch $n "$OUT/$f.straight" /tmp/$f "${common[@]}" --steps 6 --log-json "$OUT/$f.straight.jsonl"
  launch $n "$OUT/$f.again" /tmp/$f "${common[@]}" --steps 6 --log-json "$OUT/$f.again.jsonl"
  launch $n "$OUT/$f.first" /tmp/$f "${common[@]}" --steps 3 --checkpoint-dir "$ck" \
    --checkpoint-every 3 --log-json "$OUT/$f.resumed.jsonl"
  launch $n "$OUT/$f.second" /tmp/$f "${common[@]}" --steps 3 --checkpoint-dir "$ck" --resume \
    --log-json "$OUT/$f.resumed.jsonl"
  files=$(ls "$ck" | tr '\n' ' ')
  part=$(ls "$ck"/step-3.rank0-of-$n.safetensors)
  python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-1]^=1; open(p,'wb').write(b)" "$part"
  refused=accepted
  launch $n "$OUT/$f.corrupt" /tmp/$f "${common[@]}" --steps 1 --checkpoint-dir "$ck" --resume ||
    refused="refused: $(grep -ho 'does not match its checksum' "$OUT/$f.corrupt".* | head -1)"
  printf "%-9s %-6s %-15s %-15s %-28s %s\n" $f $n "$(maxrel "$OUT/$f.resumed.jsonl" "$OUT/$f.straight.jsonl")" \
    "$(maxrel "$OUT/$f.again.jsonl" "$OUT/$f.straight.jsonl")" "$files" "$refused"
done
