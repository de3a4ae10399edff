#!/usr/bin/env bash
# On the development machine: training binaries built by two loomc builds
# (BASE, the commit before the loomrt lowering; NEW, this tree) must give the
# same losses on the CPU, compared as the JSON log writes them (8
# significant digits of the fp32 loss). Models: GPT and Llama from the
# generators (fp32 and bf16), GPT-2- and Llama-style ONNX exports of
# PyTorch (Debian's) with their weights, the four --optimizer-offload modes,
# ZeRO 0-3 on 2 and 4 ranks under mpirun.
#   BASE=/path/to/old/build/bin bench/compare-lowering-cpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
NEW=${NEW:-build/bin}
BASE=${BASE:?set BASE to the bin folder of a loomc built from the commit before the lowering}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 test/Tools/Inputs/tokens.py "$T/tok.bin" 20000 256 > /dev/null
MPI=(mpirun --allow-run-as-root --oversubscribe -np)
export OMP_NUM_THREADS=1
small=gpt:layers=2,d_model=32,heads=2,vocab=256,seq=16,batch=4
llama=llama:layers=2,d_model=32,heads=2,vocab=256,seq=16,batch=4
ok=0 bad=0
run() { # name ranks loomc-args...
  local name=$1 ranks=$2; shift 2
  for w in base new; do
    local bin=$NEW; [ $w = base ] && bin=$BASE
    "$bin/loomc" "$@" -o "$T/$w" 2> "$T/$w.err" || { echo "$name: $w loomc failed: $(tail -1 "$T/$w.err")"; bad=$((bad+1)); return; }
    local cmd=("$T/$w"); [ "$ranks" -gt 1 ] && cmd=("${MPI[@]}" "$ranks" "$T/$w")
    rm -f "$T/$w.jsonl"
    "${cmd[@]}" --data "$T/tok.bin" --steps 6 --seed 3 --log-json "$T/$w.jsonl" > /dev/null 2>&1
    # The JSON log's losses (%.8g; rank 0's line per step).
    grep -o '"loss": [^,]*' "$T/$w.jsonl" 2> /dev/null | cut -d' ' -f2 > "$T/$w.loss"
  done
  if [ -s "$T/base.loss" ] && cmp -s "$T/base.loss" "$T/new.loss"; then
    ok=$((ok+1)); printf "%-28s identical (%s)\n" "$name" "$(tr '\n' ' ' < "$T/new.loss" | cut -c1-60)"
  else
    bad=$((bad+1)); printf "%-28s DIFFERENT\n" "$name"; paste "$T/base.loss" "$T/new.loss" | head -3
  fi
}
run gpt-fp32 1 --model "$small"
run gpt-bf16 1 --model "$small" --precision=bf16
run llama-fp32 1 --model "$llama"
run llama-bf16 1 --model "$llama" --precision=bf16
run gpt-sgd 1 --model "$small" --optimizer=sgd --lr=0.1
for m in cpu static:0.5 interleaved; do
  run "offload-$m" 1 --model "$small" --precision=bf16 --optimizer-offload=$m --sub-group-size=3000
done
for r in 2 4; do
  for z in 0 1 2 3; do
    run "zero$z-$r-ranks" $r --model "gpt:layers=2,d_model=32,heads=2,vocab=256,seq=16,batch=8" \
      --topology=rank=$r --zero-stage=$z --bucket-size=2000
  done
done
# GPT-2- and Llama-style exports of PyTorch (test/Import/Inputs, made by
# make_onnx.py) with their weights; vocabulary 50.
python3 test/Tools/Inputs/tokens.py "$T/tok50.bin" 20000 50 > /dev/null
cp "$T/tok.bin" "$T/tok256.bin"
cp "$T/tok50.bin" "$T/tok.bin"
for m in gpt llama; do
  run "onnx-$m" 1 test/Import/Inputs/$m.onnx
  run "onnx-$m-bf16" 1 test/Import/Inputs/$m.onnx --precision=bf16
done
echo "identical: $ok, different or failed: $bad"
