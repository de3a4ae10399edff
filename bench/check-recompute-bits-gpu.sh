#!/usr/bin/env bash
# On one H200, after bench/gen-recompute-bits-gpu.sh: each binary of
# .carry/rbits trains 5 steps from one seed; prints each loss sequence and
# whether the pairs that should agree bit for bit do.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
G=.carry/rbits
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
B="rb-none-bf16 rb-full-bf16 rb-sel-bf16 rb-none-fp32 rb-full-fp32 rb-cpu-full rb-int-full"
for f in $B; do
  { gunzip -c "$G/$f.cpp.gz" > "/tmp/$f.cpp" && link_binary "/tmp/$f.cpp" "/tmp/$f" -O1 \
      2> "$OUT/$f.compile.log" || echo "compiling $f failed"; } &
done
write_tokens 50304 "$OUT/tok.bin"
wait
for f in $B; do
  rm -f "$OUT/$f.jsonl"
  timeout 120 "/tmp/$f" --data "$OUT/tok.bin" --steps 5 --seed 3 --log-json "$OUT/$f.jsonl" \
    > "$OUT/$f.txt" 2>&1 || echo "$f failed: $(tail -2 "$OUT/$f.txt")"
done
python3 - "$OUT" $B <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
loss = {}
for n in names:
    try:
        loss[n] = [json.loads(l)["loss"] for l in open(f"{out}/{n}.jsonl") if '"loss"' in l]
    except OSError:
        loss[n] = []
for n in names:
    print(f"{n:14s} {' '.join(f'{x:.7f}' for x in loss[n])}")
def cmp(a, b):
    x, y = loss[a], loss[b]
    if not x or not y:
        return "missing"
    if x == y:
        return "identical"
    d = max(abs(p - q) / abs(q) for p, q in zip(x, y))
    first = next(i for i, (p, q) in enumerate(zip(x, y)) if p != q) + 1
    return f"differ from step {first}, max rel {d:.1e}"
for a, b in [("rb-none-bf16", "rb-full-bf16"), ("rb-none-bf16", "rb-sel-bf16"),
             ("rb-none-fp32", "rb-full-fp32"), ("rb-cpu-full", "rb-int-full"),
             ("rb-full-bf16", "rb-cpu-full")]:
    print(f"{a} vs {b}: {cmp(a, b)}")
PY
