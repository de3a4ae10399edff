#!/usr/bin/env bash
# On the development machine (it has MLIR): what bench/run-moe-gpu.sh needs
# to check the mixture-of-experts generator on a GPU host (issue 52), into
# .carry/moe:
#   moe-cuda.cpp, moe-cuda-bf16.cpp, moe-cuda-cap.cpp  CUDA sources of a
#       Mixtral-style model (2 layers, d 128, 8 experts, top-2; dropless, and
#       capacity 1.25), fp32 and bf16
#   cpu.json, cpu-cap.json  the same models' 20 losses from CPU binaries run
#       here on the same tokens (the GPU's reference)
#   hf/  a CPU run's checkpoint after one step, exported by loom-ckpt to
#       model.safetensors under Hugging Face's Mixtral names, the model's
#       shape (config.json) and the binary's second loss, for
#       bench/moe_hf_check.py (transformers' MixtralForCausalLM)
#   googletest/  Debian's GoogleTest sources (the GPU hosts have none)
#   bench/gen-moe-gpu.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
GEN=.carry/moe
rm -rf "$GEN" && mkdir -p "$GEN/hf"
cp -r /usr/src/googletest "$GEN/googletest"
python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 "$GEN/gpl3.bin" > /dev/null
base=layers=2,d_model=128,heads=4,vocab=256,seq=64,batch=8,ffn=256,experts=8,top_k=2,aux=0.01
for v in "" "-cap"; do
  model="moe:$base"
  [ "$v" = -cap ] && model="$model,capacity=1.25"
  "$BIN/loomc" --model "$model" --target=cuda --compile-to=cpp -o "$GEN/moe-cuda$v.cpp"
  "$BIN/loomc" --model "$model" --target=cpu -o "$GEN/cpu$v"
  rm -f "$GEN/cpu$v.json"
  "$GEN/cpu$v" --data "$GEN/gpl3.bin" --steps 20 --log-json "$GEN/cpu$v.json" > /dev/null
  rm "$GEN/cpu$v"
done
"$BIN/loomc" --model "moe:$base" --target=cuda --precision=bf16 --compile-to=cpp \
  -o "$GEN/moe-cuda-bf16.cpp"
# The Hugging Face check: one step, a checkpoint, the second step's loss.
"$BIN/loomc" --model "moe:$base" --target=cpu -o "$GEN/hf/train"
"$GEN/hf/train" --data "$GEN/gpl3.bin" --steps 1 --checkpoint-dir "$GEN/hf/ck" \
  --checkpoint-every 1 > /dev/null
"$GEN/hf/train" --data "$GEN/gpl3.bin" --steps 2 --log-json "$GEN/hf/two.json" > /dev/null
"$BIN/loom-ckpt" export "$GEN/hf/ck" -o "$GEN/hf/model.safetensors"
echo "{\"spec\": \"$base\"}" > "$GEN/hf/config.json"
rm -rf "$GEN/hf/train" "$GEN/hf/ck"
ls -la "$GEN" "$GEN/hf"
