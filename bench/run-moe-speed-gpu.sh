#!/usr/bin/env bash
# On a one-GPU host: the mixture-of-experts model of bench/gen-moe-speed-gpu.sh
# (.carry/moesp), Loom's two binaries (capacity 1.25, dropless) for 20 steps
# each beside Hugging Face's MixtralForCausalLM (bench/mixtral_torch.py,
# dropless, eager with transformers' grouped GEMM), same shape and batch.
# Prints a table last: mean step (steps 6-20; the peer's median after 3),
# tokens/s, MFU over the active parameters (6 N_active tokens/s over 989
# TFLOP/s), the ratio to the peer and loomc's prediction.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/moesp
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
for r in cap full; do compile_gz "$GEN/$r.cpp.gz" "/tmp/moesp_$r" & done
write_tokens 32000 /tmp/moesp.bin
wait
for r in cap full; do
  link_gz "$GEN/$r.cpp.gz" "/tmp/moesp_$r"
  rm -f "$OUT/$r.jsonl"
  "/tmp/moesp_$r" --data /tmp/moesp.bin --steps 20 --log-json "$OUT/$r.jsonl" > "$OUT/$r.log" 2>&1 ||
    { echo "$r failed:"; tail -3 "$OUT/$r.log"; }
done
python3 bench/mixtral_torch.py > "$OUT/peer.json" 2> "$OUT/peer.log" || tail -5 "$OUT/peer.log"
python3 - "$OUT" "$GEN" <<'PY'
import json, os, re, sys
out, gen = sys.argv[1:]
peer = json.loads(open(f"{out}/peer.json").read().strip().splitlines()[-1]) \
    if os.path.getsize(f"{out}/peer.json") else None
active = peer["active_params"] if peer else 509_083_648
def mfu(tps): return 6 * active * tps / 989e12
print(f"active parameters a token: {active / 1e6:.1f}M")
print("| run | step | tokens/s | MFU | vs peer | predicted step | last loss |")
print("|---|---|---|---|---|---|---|")
for r, what in (("cap", "Loom, capacity 1.25"), ("full", "Loom, dropless")):
    try:
        steps = [json.loads(l) for l in open(f"{out}/{r}.jsonl")]
    except OSError:
        steps = []
    pred = re.search(r"predicted step .*?: ([0-9.]+) s", open(f"{gen}/{r}.predicted.txt").read())
    if len(steps) < 20:
        print(f"| {what} | failed | | | | {pred.group(1)} s | |")
        continue
    ms = sum(s["step_ms"] for s in steps[5:]) / len(steps[5:])
    tps = 8 * 1024 / (ms / 1e3)
    ratio = f"{tps / peer['tokens_per_s']:.2f}x" if peer else "-"
    print(f"| {what} | {ms:.1f} ms | {tps:,.0f} | {100 * mfu(tps):.1f}% | {ratio} | "
          f"{pred.group(1)} s | {steps[-1]['loss']:.4f} |")
if peer:
    print(f"| {peer['impl']} (dropless) | {peer['step_ms']:.1f} ms | {peer['tokens_per_s']:,.0f} | "
          f"{100 * mfu(peer['tokens_per_s']):.1f}% | 1.00x | | {peer['loss']:.4f} |")
PY
