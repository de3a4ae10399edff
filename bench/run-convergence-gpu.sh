#!/usr/bin/env bash
# On nvidia-h200-x2, after bench/gen-convergence-gpu.sh (.carry/conv; carry
# .carry/deps too): issue 53's convergence and speed runs of the 1.1B Llama.
#   ROWS="flat zpp"   rows trained STEPS (default 500) steps on NVLink on the
#                     Python-sources corpus, rows drawn at random
#                     (--sample random, seed 0: every row the same batches)
#   SPEED="flat zpp"  rows run on the emulated 6.25 GB/s link
#                     (LOOMRT_SLOW_LINK=1:6.25) for SPEED_STEPS (default 20;
#                     diloco 120: its exchanges come every 50 steps)
#   GPL=1             also flat and zpp for 150 steps on the GPL-3's bytes read
#                     in order (the issue's first measurement, on 2 GPUs)
#   SCHED="W D R"     Adam's rate warms up over W steps and decays by a
#                     cosine to R of it at step D (the binaries' --lr-schedule
#                     cosine; default "50 STEPS 0.1", what users run at this
#                     scale); SCHED=constant: lr 3e-4 from the first step
#   DEADLINE=S        start no run after S seconds (default 560), so the
#                     table still comes back inside the call's limit
# A table last (bench/convergence.py): per row the mean step, the mean loss
# of the last 50 steps and its gap to flat's; the loss curves in
# $OUT/convergence.csv and $OUT/convergence.svg.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
C=.carry/conv
START=$SECONDS
DEADLINE=${DEADLINE:-560}
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
source bench/launch.sh
ROWS=${ROWS:-}; SPEED=${SPEED:-}
need=$(printf '%s\n' ${ROWS//:[0-9]/} $SPEED $([ "${GPL:-0}" = 1 ] && echo flat zpp) | sort -u)
for r in $need; do compile_gz "$C/$r.cpp.gz" "/tmp/cv_$r" & done
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90
wait
for r in $need; do link_gz "$C/$r.cpp.gz" "/tmp/cv_$r"; done
echo "built in $((SECONDS - START)) s"
go() {  # go NAME ROW ARGS...: one run unless past the deadline
  local name=$1 row=$2 ranks=2; shift 2
  case $row in *4) ranks=4 ;; esac  # the 4-GPU rows (nvidia-h200-x4)
  if [ $((SECONDS - START)) -ge "$DEADLINE" ]; then echo "$name skipped: past ${DEADLINE} s"; return; fi
  local t0=$SECONDS
  run_logged "$ranks" "$name" timeout 400 "/tmp/cv_$row" "$@"
  echo "$name: $((SECONDS - t0)) s"
}
STEPS=${STEPS:-500}
SCHED=${SCHED:-50 $STEPS 0.1}
sched=()
if [ "$SCHED" != constant ]; then
  read -r w d m <<< "$SCHED"
  sched=(--lr-schedule cosine --warmup-steps "$w" --decay-steps "$d" --min-lr-ratio "$m")
fi
for r in $ROWS; do
  # ROW:SEED runs ROW with another --seed (a second draw of the baseline:
  # how far two uncompressed runs differ).
  row=${r%%:*}; seed=0; [ "$row" != "$r" ] && seed=${r#*:}
  go "$r" "$row" --data "$C/corpus.bin" --sample random --steps "$STEPS" --seed "$seed" "${sched[@]}"
done
if [ "${GPL:-0}" = 1 ]; then
  for r in flat zpp; do go "gpl-$r" "$r" --data "$C/gpl3.bin" --steps 150; done
fi
for r in $SPEED; do
  n=${SPEED_STEPS:-20}; [ "$r" = diloco ] && n=120
  link=1:6.25; case $r in *4) link=2:6.25 ;; esac  # 4 ranks: nodes of 2
  export LOOMRT_SLOW_LINK=$link; go "slow-$r" "$r" --data "$C/corpus.bin" --sample random --steps "$n"
done
unset LOOMRT_SLOW_LINK
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
python3 bench/convergence.py "$OUT" --gen "$C" --csv "$OUT/convergence.csv" --svg "$OUT/convergence.svg" |
  tee "$OUT/table.txt"
# At most 8 files come back from a call: the logs go in one archive.
(cd "$OUT" && tar czf /tmp/cv_logs.tgz --exclude 'convergence.*' --exclude table.txt . &&
  find . -type f ! -name 'convergence.*' ! -name table.txt -delete && mv /tmp/cv_logs.tgz logs.tgz)
