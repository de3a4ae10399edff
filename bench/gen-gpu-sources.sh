#!/usr/bin/env bash
# On the development machine (it has MLIR; the GPU host does not): generates
# the training sources bench/run-gpt2.sh compiles on the GPU host, into
# .carry/gen (carried with the working tree, not committed).
#   bench/gen-gpu-sources.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
GEN=.carry/gen
mkdir -p "$GEN"
python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 "$GEN/gpl3.bin" > /dev/null
small=gpt:layers=2,d_model=64,heads=4,vocab=256,seq=32,batch=4
gpt2=gpt:layers=12,d_model=768,heads=12,vocab=50257,seq=1024
for t in cpu cuda; do
  "$BIN/loomc" --model "$small" --target=$t --compile-to=cpp -o "$GEN/small_$t.cpp"
done
"$BIN/loomc" --model "$small" --target=cuda --precision=bf16 --compile-to=cpp -o "$GEN/small_bf16_cuda.cpp"
for b in 16 8; do
  "$BIN/loomc" --model "$gpt2,batch=$b" --target=cuda --compile-to=cpp -o "$GEN/gpt2_124m_b${b}_cuda.cpp"
  "$BIN/loomc" --model "$gpt2,batch=$b" --target=cuda --precision=bf16 --compile-to=cpp \
    -o "$GEN/gpt2_124m_b${b}_bf16_cuda.cpp"
done
# Data parallelism on 2 GPUs (bench/run-dp.sh): a small GPT for the loss
# match (one GPU with the global batch vs 2 ranks at ZeRO 0 and 3) and GPT-2
# 124M (global batch 16) for the step time of stage 0 vs stage 3.
dps=gpt:layers=2,d_model=64,heads=4,vocab=256,seq=32,batch=8
"$BIN/loomc" --model "$dps" --target=cuda --precision=bf16 --compile-to=cpp -o "$GEN/dp_small_1gpu_cuda.cpp"
for z in 0 3; do
  "$BIN/loomc" --model "$dps" --target=cuda --precision=bf16 --topology=gpu=2 --zero-stage=$z \
    --compile-to=cpp -o "$GEN/dp_small_z${z}_cuda.cpp"
  "$BIN/loomc" --model "$gpt2,batch=16" --target=cuda --precision=bf16 --topology=gpu=2 \
    --zero-stage=$z --compile-to=cpp -o "$GEN/dp_gpt2_z${z}_cuda.cpp"
done
# The offload schedule (bench/run-offload.sh): the small GPT and GPT-2 124M
# (bf16, batch 8) with the optimizer on the device and on the CPU.
for m in none cpu static:0.5 interleaved; do
  f=${m/:/}
  "$BIN/loomc" --model "$small" --target=cuda --optimizer-offload=$m --compile-to=cpp \
    -o "$GEN/off_small_${f}_cuda.cpp"
  "$BIN/loomc" --model "$gpt2,batch=8" --target=cuda --precision=bf16 --optimizer-offload=$m \
    --compile-to=cpp -o "$GEN/off_gpt2_${f}_cuda.cpp"
done
# Every placement in one step (bench/run-offload.sh): the small GPT's
# subgroups planned by hand as gpu, stream and cpu in turn, fp32 and bf16.
for p in fp32 bf16; do
  "$BIN/loomc" --model "$small" --precision=$p --compile-to=optimizer |
    "$BIN/loom-opt" --loom-optimizer-subgroups=sub-group-size=20000 |
    python3 -c '
import itertools, re, sys
places = itertools.cycle(["gpu", "stream", "cpu"])
print(re.sub(r"(loom\.subgroup @sg\d+ \[[^\]]*\] numel \d+)",
             lambda m: m.group(1) + " {update = \"%s\"}" % next(places), sys.stdin.read()))' |
    "$BIN/loom-opt" --loom-offload-optimizer=mode=subgroups > "$GEN/off_small_mixed_$p.mlir"
  "$BIN/loomc" "$GEN/off_small_mixed_$p.mlir" --target=cuda --compile-to=cpp \
    -o "$GEN/off_small_mixed_${p}_cuda.cpp"
  grep -c 'update = ' "$GEN/off_small_mixed_$p.mlir" > /dev/null
done
# GPT-2- and Llama-style models exported from PyTorch, with their weights.
/usr/bin/python3 - "$GEN" <<'PY' 2>/dev/null
import sys, torch
sys.path.insert(0, "test/Import/Inputs")
from make_onnx import GPT, Llama, export
torch.manual_seed(0)
for name, m in (("gpt", GPT(vocab=256, seq=32, d=64, heads=4)),
                ("llama", Llama(vocab=256, seq=32, d=64, heads=4, ffn=176))):
    export(m, (torch.zeros(4, 32, dtype=torch.int64),), f"{sys.argv[1]}/onnx_{name}.onnx",
           (["tokens"], ["logits"]))
PY
for v in cpu cuda bf16_cuda; do
  p=(); [ $v = bf16_cuda ] && p=(--precision=bf16)
  "$BIN/loomc" "$GEN/onnx_gpt.onnx" --task=lm --target=${v#bf16_} "${p[@]}" --compile-to=cpp \
    -o "$GEN/onnx_gpt_$v.cpp"
  "$BIN/loomc" "$GEN/onnx_llama.onnx" --task=lm --frozen=cos,sin --target=${v#bf16_} "${p[@]}" \
    --compile-to=cpp -o "$GEN/onnx_llama_$v.cpp"
done
ls -la "$GEN"
