#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources for
# bench/check-streamed-gpu.sh into .carry/streamed. Issue 44's first
# defect: an update streamed to the GPU must give the bits the CPU's
# update gives. A Llama-style model (4 layers, d 1024, ffn 2816, vocabulary
# 32000, bf16, batch 2 x 1024) compiled three ways for CUDA:
#   st-cpu   --optimizer-offload=cpu (every update on the CPU)
#   st-hand  a hand-written plan: the optimizer subgroups placed gpu,
#            stream, cpu in turn (loom-offload-optimizer mode=subgroups)
#   st-none  no offload (every update on the GPU, state resident)
# st-cpu and st-hand must give the same losses bit for bit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
GEN=.carry/streamed
rm -rf "$GEN" && mkdir -p "$GEN"
S=llama:layers=4,d_model=1024,heads=16,ffn=2816,vocab=32000,seq=1024,batch=2
common=(--model "$S" --precision=bf16 --lr=3e-4 --target=cuda)
"$BIN/loomc" "${common[@]}" --optimizer-offload=cpu --compile-to=cpp -o "$GEN/st-cpu.cpp"
"$BIN/loomc" "${common[@]}" --compile-to=cpp -o "$GEN/st-none.cpp"
"$BIN/loomc" "${common[@]}" --compile-to=optimizer -o "$GEN/st.opt.mlir"
"$BIN/loom-opt" --loom-optimizer-subgroups=sub-group-size=5000000 "$GEN/st.opt.mlir" |
  python3 -c '
import re, sys
places = iter(["gpu", "stream", "cpu"] * 100)
text, n = re.subn(r"(loom\.subgroup @sg\d+ \[[^\]]*\] numel \d+)",
                  lambda m: m.group(1) + " update " + next(places), sys.stdin.read())
assert n >= 6, f"only {n} subgroups"
sys.stderr.write(f"st-hand: {n} subgroups placed gpu, stream, cpu in turn\n")
sys.stdout.write(text)' > "$GEN/st.planned.mlir"
"$BIN/loom-opt" --loom-offload-optimizer=mode=subgroups "$GEN/st.planned.mlir" -o "$GEN/st.hand.mlir"
"$BIN/loomc" "$GEN/st.hand.mlir" --target=cuda --compile-to=cpp -o "$GEN/st-hand.cpp"
# The same plan with the CPU's updates on the step's host thread (what
# loomc does for CUDA), and a plan shaped as the 7.1B Llama's interleaved
# one (the first subgroups resident, one streamed among CPU ones), with
# and without the host thread.
"$BIN/loom-opt" --loom-offload-optimizer="mode=subgroups host-thread=1" "$GEN/st.planned.mlir" \
  -o "$GEN/st.hand-ht.mlir"
"$BIN/loomc" "$GEN/st.hand-ht.mlir" --target=cuda --compile-to=cpp -o "$GEN/st-hand-ht.cpp"
"$BIN/loom-opt" --loom-optimizer-subgroups=sub-group-size=5000000 "$GEN/st.opt.mlir" |
  python3 -c '
import re, sys
places = iter(["gpu"] * 4 + ["cpu", "cpu", "stream"] + ["cpu"] * 100)
sys.stdout.write(re.sub(r"(loom\.subgroup @sg\d+ \[[^\]]*\] numel \d+)",
                        lambda m: m.group(1) + " update " + next(places), sys.stdin.read()))' \
  > "$GEN/st.mix.mlir"
for ht in 0 1; do
  "$BIN/loom-opt" --loom-offload-optimizer="mode=subgroups host-thread=$ht" "$GEN/st.mix.mlir" \
    -o "$GEN/st.mix$ht.mlir"
  "$BIN/loomc" "$GEN/st.mix$ht.mlir" --target=cuda --compile-to=cpp -o "$GEN/st-mix$ht.cpp"
done
rm -f "$GEN"/*.mlir
ls -la "$GEN"
