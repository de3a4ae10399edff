#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources for
# bench/run-pipeline-gpu.sh into .carry/pp, and loomc's predictions
# (NAME.predicted.txt; committed to bench/RESULTS.md before the run).
# Issue 48's GPU row: the 6.7B Llama (32 layers, d 4096, ffn 11008,
# vocabulary 32000), bf16, cut into 2 stages on 2 H200s, 8 micro-batches of
# one 1024-token sequence a step (bench/run-pipelining-peer-gpu.sh runs
# torch.distributed.pipelining on the same model and batch):
#   pp2-1f1b    --pipeline-schedule=1f1b
#   pp2-gpipe   --pipeline-schedule=gpipe
#   pp2-zb-h1   --pipeline-schedule=zb-h1
#   pp2-ilV     --pipeline-schedule=interleaved:V (V model chunks a stage;
#               the default rows: V = 2)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
C=.carry/pp
rm -rf "$C" && mkdir -p "$C"
S=llama:layers=32,d_model=4096,heads=32,ffn=11008,vocab=32000,seq=1024,batch=8
HW=bench/hardware/h200x2-kernels-2026-11-30.json
for r in ${ROWS:-pp2-1f1b pp2-gpipe pp2-zb-h1 pp2-il2}; do
  sched="${r#pp2-}"
  case "$sched" in il*) sched="interleaved:${sched#il}" ;; esac
  "$BIN/loomc" --model "$S" --lr=3e-4 --target=cuda --precision=bf16 --hardware="$HW" \
    --pipeline-parallel=2 --micro-batches=8 --pipeline-schedule="$sched" \
    --compile-to=cpp -o "$C/$r.cpp" 2> "$C/$r.predicted.txt"
  rm -f "$C/$r.cpp.kernels.cu"
  gzip -f "$C/$r.cpp"
  grep "loom-pipeline-cut\|stage [01]:\|chunk [0-3]:\|step about\|predicted stage\|predicted pipeline" \
    "$C/$r.predicted.txt" |
    sed "s/ on '2x H200[^:]*'//; s/^/$r: /"
done
