#!/usr/bin/env bash
# On nvidia-h200-x2, after bench/gen-moe-ep-gpu.sh (.carry/moeep): the
# runtime's MoE kernel tests on CUDA, then the check (the small fp32 mixture with --expert-parallel=2 on 2 GPUs against
# one GPU with the global batch, 10 steps), then the 6.93B mixture with
# --expert-parallel=2 (STEPS steps, default 12) beside the PyTorch peer
# (bench/moe_ep_torch.py: the same model, capacity and batch, its experts
# split by all_to_all_single, DDP over the rest; PEER=0 skips it). A table
# last: the median step of steps 4 on, the world's tokens/s, MFU over the
# active parameters (6 x 1.94e9 x tokens/s over 2 x 989 TFLOP/s), rank 0's
# card use, the ratio to the peer and loomc's prediction.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
C=.carry/moeep
export MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
source bench/launch.sh
for r in chk-one chk-ep2 ep2; do compile_gz "$C/$r.cpp.gz" "/tmp/$r" & done
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90 -DLOOM_GTEST_SOURCE_DIR="$PWD/$C/googletest"
ninja -C build-bench loomrt-tests > "$OUT/ninja-tests.log" 2>&1 || tail -5 "$OUT/ninja-tests.log"
T=$(find build-bench -name loomrt-tests -type f | head -1)
$T --gtest_filter='*Moe*' > "$OUT/gtest.txt" 2>&1
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|FAILED \]" "$OUT/gtest.txt" | tail -6
wait
write_tokens 32000 "$OUT/tok.bin"
for r in chk-one chk-ep2 ep2; do link_gz "$C/$r.cpp.gz" "/tmp/$r"; done
rm -f "$OUT/chk-one.jsonl"
timeout 120 /tmp/chk-one --data "$OUT/tok.bin" --steps 10 --log-json "$OUT/chk-one.jsonl" \
  > "$OUT/chk-one.log" 2>&1 || { echo "chk-one failed:"; tail -n 3 "$OUT/chk-one.log"; }
run_logged 2 chk-ep2 timeout 120 /tmp/chk-ep2 --data "$OUT/tok.bin" --steps 10
run_logged 2 ep2 timeout 300 /tmp/ep2 --data "$OUT/tok.bin" --steps "${STEPS:-12}"
if [ "${PEER:-1}" = 1 ]; then
  launch 2 "$OUT/torch-ep2" timeout 300 python3 bench/moe_ep_torch.py --steps 12 ||
    { echo "torch peer failed:"; tail -n 8 "$OUT/torch-ep2.0"; }
  grep -h '^{' "$OUT/torch-ep2.0" > "$OUT/torch-ep2.json"
fi
python3 - "$OUT" "$C" <<'PY'
import json, re, statistics, sys
out, gen = sys.argv[1:]
def log(name):
    try:
        return [s for s in (json.loads(l) for l in open(f"{out}/{name}.jsonl")) if "loss" in s]
    except OSError:
        return []
one, ep = log("chk-one"), log("chk-ep2")
if len(one) == 10 and len(ep) == 10:
    err = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(ep, one))
    print(f"check: EP=2 on 2 GPUs against one GPU, fp32, 10 steps: largest relative loss "
          f"difference {err:.2e} ({'within' if err <= 1e-5 else 'NOT within'} 1e-5)")
else:
    print(f"check: failed ({len(one)} and {len(ep)} steps logged)")
ACTIVE, TOK = 1.94e9, 2 * 8 * 1024
pred = re.search(r": ([0-9.]+) s \(last gradient", open(f"{gen}/ep2.predicted.txt").read())
pred = float(pred.group(1)) if pred else float("nan")
try:
    peer = json.loads(open(f"{out}/torch-ep2.json").read().splitlines()[-1])
except Exception:
    peer = None
print("| run | step s | tokens/s | MFU (active, 2 GPUs) | card GiB (rank 0) | vs peer | predicted step | loss first -> last |")
print("|---|---|---|---|---|---|---|---|")
steps = log("ep2")
if len(steps) >= 5:
    m = statistics.median(s["step_ms"] for s in steps[3:]) / 1e3
    used = max(s.get("card_used_mib", float("nan")) for s in steps) / 1024
    ratio = f"{TOK / m / peer['tokens_per_s']:.2f}x" if peer else "-"
    print(f"| Loom, --expert-parallel=2 | {m:.4f} | {TOK / m:,.0f} | {6 * ACTIVE * TOK / m / (2 * 989e12):.1%} | "
          f"{used:.1f} | {ratio} | {pred:.3f} s ({pred / m - 1:+.1%}) | {steps[0]['loss']:.4f} -> {steps[-1]['loss']:.4f} |")
else:
    print(f"| Loom, --expert-parallel=2 | failed ({len(steps)} steps) | | | | | {pred:.3f} s | |")
if peer:
    tps = peer["tokens_per_s"]
    print(f"| {peer['impl']} | {peer['step_ms'] / 1e3:.4f} | {tps:,.0f} | "
          f"{6 * ACTIVE * tps / (2 * 989e12):.1%} | {peer['peak_reserved_gib']:.1f} (reserved) | 1.00x | | "
          f"{peer['loss']:.4f} (last) |")
PY
