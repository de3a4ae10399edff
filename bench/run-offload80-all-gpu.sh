#!/usr/bin/env bash
# On a one-H200 host, in one call: issue 44's first acceptance row set. The
# six 80-GiB rows of bench/run-offload80-gpu.sh (cpu then interleaved for
# the GPT 6.25B, the Llama 7.1B and the landed Llama 6.7B; 10 steps, each
# binary re-planning after step 5), then the PyTorch
# FSDP2 + CPUOffloadPolicy peers capped at 80 GiB, as many as fit before
# DEADLINE seconds (default 570) since this script started. ROWS and
# PEER_MODELS choose fewer; RT set skips the runtime's build.
#   OUT=/tmp/o bench/run-offload80-all-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
begin=$SECONDS
source bench/gpu-runtime.sh
ROWS="${ROWS:-g625-cpu g625-int l71-cpu l71-int l67-cpu l67-int}"
# The rows' generated sources compile beside the runtime's build (they need
# only its headers): about a minute of the call's 600 s, which the third
# peer needs.
for r in $ROWS; do compile_gz ".carry/off80/$r.cpp.gz" "/tmp/$r" & done
[ -n "${RT:-}" ] || build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
wait
export RT
ROWS="$ROWS" STEPS=10 TIMEOUT=150 bash bench/run-offload80-gpu.sh > "$OUT/table.txt" 2>&1
# The rows' table and logs first: a call that runs out of time while a
# peer runs still returns them (LOGS: a .tgz of $OUT).
cat "$OUT/table.txt"
[ -z "${LOGS:-}" ] || tar czf "$LOGS" -C "$OUT" .
for m in ${PEER_MODELS:-l71 l67 g625}; do
  left=$(( ${DEADLINE:-570} - (SECONDS - begin) ))
  [ "$left" -gt 60 ] || { echo "peer $m: not run ($left s left)"; continue; }
  echo "peer $m ($left s left):"
  PEERS=1 ROWS=$m PEER_TIMEOUT=$((left - 10)) bash bench/run-offload80-gpu.sh 2>&1 | tail -2
done
for r in $ROWS; do
  echo "$r: $(grep -h "ready in\|released in\|wall" "$OUT/$r.txt" | tr '\n' ' ')"
done
