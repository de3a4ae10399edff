#!/usr/bin/env bash
# Writes what loomc generates for a fixed set of models and flags into OUT:
# the lowered loomrt IR and the C++ (with its fused-kernel .cu) of each case,
# for the CPU and CUDA targets. A refactoring that claims "no behaviour
# change" is checked by running this before and after and diffing the two
# folders (docs/developing.md, "Refactoring").
#   scripts/codegen-snapshot.sh BUILD_DIR OUT_DIR
set -euo pipefail
BUILD="$(cd "${1:?build dir}" && pwd)"
mkdir -p "${2:?output dir}"
OUT="$(cd "$2" && pwd)"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
LOOMC="$BUILD/bin/loomc"
ZOO="$(mktemp -d)"
trap 'rm -rf "$ZOO"' EXIT
tar -C "$ZOO" -xzf "$SRC/test/Zoo/zoo.tgz"

GPT='gpt:layers=2,d_model=64,heads=4,vocab=256,seq=32,batch=2'
LLAMA='llama:layers=2,d_model=64,heads=2,vocab=256,seq=32,batch=2,ffn=128'
GPT4='gpt:layers=2,d_model=64,heads=4,vocab=256,seq=32,batch=4'
GPT2='gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=8'
# name | loomc arguments (the model first)
CASES=(
  "gpt|--model $GPT"
  "gpt-nofuse|--model $GPT --no-fuse"
  "gpt-online|--model $GPT --arena=online"
  "gpt-recompute|--model $GPT --recompute"
  "gpt-sgd|--model $GPT --optimizer=sgd"
  "llama-bf16|--model $LLAMA --precision=bf16"
  "gpt2-124m|--model $GPT2 --precision=bf16"
  "mlp|--model mlp:"
  "sage|--model sage:"
  "gcn|--model gcn:"
  "dp-z0|--model $GPT --topology=rank=2"
  "dp-z1|--model $GPT --topology=rank=2 --zero-stage=1"
  "dp-z2|--model $GPT --topology=rank=2 --zero-stage=2 --bucket-size=1000"
  "dp-z3|--model $GPT --topology=rank=2 --zero-stage=3 --bucket-size=1000"
  "dp-z3-hier|--model $GPT4 --topology=node=2,gpu=2 --zero-stage=3 --hierarchy=auto"
  "zeropp|--model $GPT4 --topology=node=2,gpu=2 --zero-stage=3 --zeropp=qwz,hpz,qgz"
  "onebit|--model $GPT --topology=rank=2 --optimizer=onebit-adam --freeze-step=2"
  "onebit-z2|--model $GPT --topology=rank=2 --zero-stage=2 --optimizer=onebit-adam --freeze-step=2 --onebit-variance=replicated"
  "diloco|--model $GPT --topology=replica=2,gpu=1 --diloco=inner-steps=4,fragments=2"
  "diloco-dp|--model $GPT4 --topology=replica=2,gpu=2 --zero-stage=1 --diloco=inner-steps=4,quant=fp8,elastic=1"
  "offload-cpu|--model $GPT --optimizer-offload=cpu"
  "offload-static|--model $GPT --optimizer-offload=static:0.5"
  "offload-il|--model $GPT --optimizer-offload=interleaved --sub-group-size=20000"
  "offload-dp|--model $GPT --topology=rank=2 --zero-stage=2 --optimizer-offload=interleaved --sub-group-size=20000"
  "offload-bf16|--model $LLAMA --precision=bf16 --optimizer-offload=cpu --host-thread=on"
)
for z in "$ZOO"/zoo/*.onnx; do
  n="$(basename "$z" .onnx)"
  frozen="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(",".join(d.get("frozen",[])))' "${z%.onnx}.json" 2>/dev/null || true)"
  CASES+=("zoo-$n|zoo/$n.onnx${frozen:+ --frozen=$frozen}")
done

# Relative model paths: the generated source names its model.
cd "$ZOO"
n_ok=0
for c in "${CASES[@]}"; do
  name="${c%%|*}"; args="${c#*|}"
  for target in cpu cuda; do
    # shellcheck disable=SC2086
    if ! "$LOOMC" $args --target=$target --compile-to=lowered -o "$OUT/$name.$target.mlir" >"$OUT/$name.$target.log" 2>&1 ||
       ! "$LOOMC" $args --target=$target --compile-to=cpp -o "$OUT/$name.$target.cpp" >>"$OUT/$name.$target.log" 2>&1; then
      echo "[snapshot] $name ($target): loomc failed, see $OUT/$name.$target.log"
    else
      n_ok=$((n_ok + 1))
    fi
  done
done
echo "[snapshot] ${#CASES[@]} cases x 2 targets, $n_ok compiled, in $OUT"
