#!/usr/bin/env bash
# On an H200, after bench/gen-moe-shared-gpu.sh (.carry/moeshared) and
# bench/carry-deps.sh: the mixture with a shared expert and the z-loss on
# CUDA and on the CPU, 10 steps each on the same tokens; the largest
# relative loss difference and the logged metrics side by side.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
C=.carry/moeshared
source bench/gpu-runtime.sh
for t in cuda cpu; do compile_gz "$C/$t.cpp.gz" "/tmp/ms-$t" & done
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
wait
write_tokens 32000 "$OUT/tok.bin"
for t in cuda cpu; do
  link_gz "$C/$t.cpp.gz" "/tmp/ms-$t"
  rm -f "$OUT/$t.jsonl"
  timeout 300 /tmp/ms-$t --data "$OUT/tok.bin" --steps 10 --log-json "$OUT/$t.jsonl" \
    > "$OUT/$t.log" 2>&1 || { echo "$t failed:"; tail -n 3 "$OUT/$t.log"; }
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
g, c = ([json.loads(l) for l in open(f"{out}/{t}.jsonl") if '"loss"' in l] for t in ("cuda", "cpu"))
err = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(g, c))
print(f"shared expert + z-loss, fp32, 10 steps: CUDA against CPU largest relative loss difference "
      f"{err:.2e} ({len(g)} and {len(c)} steps); losses {c[0]['loss']:.5f} -> {c[-1]['loss']:.5f}")
for k in ("moe.z_loss", "moe.aux_loss", "model.layers.0.block_sparse_moe.expert_tokens"):
    print(f"  step 10 {k}: CUDA {g[-1]['metrics'][k]}  CPU {c[-1]['metrics'][k]}")
PY
