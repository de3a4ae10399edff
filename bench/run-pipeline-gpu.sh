#!/usr/bin/env bash
# On nvidia-h200-x2, after bench/gen-pipeline-gpu.sh: each pipeline binary
# of .carry/pp trains STEPS steps (default 10) on 2 ranks, one a GPU, rank 0
# the first stage; then PyTorch's torch.distributed.pipelining on the same
# model, batch and schedule (bench/pipelining_torch.py, PEER=0 skips it).
# A table: the median step of steps 3 on, tokens/s, MFU (6 x 6.74e9
# parameters x tokens/s over 2 x 989 TFLOP/s), rank 0's card use, and each
# rank's bubble measured through CUPTI.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
C=.carry/pp
ROWS="${ROWS:-pp2-1f1b pp2-gpipe pp2-zb-h1 pp2-il2}"
PEERS="${PEERS:-1f1b interleaved-1f1b}"
export MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
source bench/launch.sh
for r in $ROWS; do compile_gz "$C/$r.cpp.gz" "/tmp/$r" & done
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
wait
write_tokens 32000 "$OUT/tok.bin"
# Each rank's GPU kernels through CUPTI (bench/kernel_times.cpp): the
# time its compute kernels take (all but NCCL's, which wait for the peer)
# against the step gives the bubble, idle time over step time.
build_kernel_times
for row in $ROWS; do  # (launch.sh's loop takes `r`)
  [ -x "/tmp/$row" ] || link_gz "$C/$row.cpp.gz" "/tmp/$row"
  rm -f "$OUT/$row.jsonl" "$OUT"/kt-"$row".*.csv "$OUT"/gaps-"$row".*.json
  launch 2 "$OUT/$row" timeout "${TIMEOUT:-240}" bash -c 'LD_PRELOAD=/tmp/libkt.so \
    LOOM_KERNEL_TIMES='"$OUT/kt-$row"'.$RANK.csv LOOM_KERNEL_GAPS='"$OUT/gaps-$row"'.$RANK.json \
    exec stdbuf -oL "$0" "$@"' "/tmp/$row" \
    --data "$OUT/tok.bin" --steps "${STEPS:-10}" --seed 1 --log-json "$OUT/$row.jsonl" ||
    { echo "$row failed:"; tail -n 4 "$OUT/$row".{0,1}; tail -n 2 "$OUT/$row.jsonl"; }
done
if [ "${PEER:-1}" = 1 ]; then
  for s in $PEERS; do
    launch 2 "$OUT/torch-$s" timeout 200 python3 bench/pipelining_torch.py --layers 32 \
      --d 4096 --heads 32 --ffn 11008 --vocab 32000 --micro-batches 8 --steps 8 \
      --schedule "$s" || { echo "torch $s failed:"; tail -n 5 "$OUT/torch-$s.0"; }
    grep -h '^{' "$OUT/torch-$s.0" > "$OUT/torch-$s.json"
  done
fi
python3 - "$OUT" $ROWS <<'PY'
import json, statistics, sys
out, rows = sys.argv[1], sys.argv[2:]
N, TOK = 6.74e9, 8 * 1024
print("| run | step s | tokens/s | MFU (2 GPUs) | rank 0's card GiB | loss step 1 -> last |")
print("|---|---|---|---|---|---|")
best, bubble = {}, {}
for r in rows:
    try:
        log = [json.loads(l) for l in open(f"{out}/{r}.jsonl")]
        log = [s for s in log if "loss" in s]
        m = statistics.median(s["step_ms"] for s in log[2:]) / 1000
    except Exception as e:
        print(f"| Loom {r} | failed ({e}) | | | | |")
        continue
    best[r] = TOK / m
    used = max(s.get("card_used_mib", float("nan")) for s in log) / 1024
    # Compute kernels a step (every step runs the same ones) over the step.
    idle = []
    for k in (0, 1):
        try:
            rows_ = [l.rsplit(",", 2) for l in open(f"{out}/kt-{r}.{k}.csv")]
            busy = sum(int(ns) for name, _, ns in rows_ if "nccl" not in name.lower())
            idle.append(1 - busy / 1e9 / len(log) / m)
        except Exception:
            idle.append(float("nan"))
    bubble[r] = idle
    print(f"| Loom {r} | {m:.4f} | {TOK / m:,.0f} | {6 * N * TOK / m / (2 * 989e12):.1%} | "
          f"{used:.1f} | {log[0]['loss']:.4f} -> {log[-1]['loss']:.4f} |")
for peer, mine in (("1f1b", "pp2-1f1b"), ("interleaved-1f1b", "pp2-il2")):
    try:
        t = json.loads(open(f"{out}/torch-{peer}.json").read().splitlines()[-1])
    except Exception as e:
        print(f"torch {peer}: no result ({e})")
        continue
    print(f"| torch.distributed.pipelining {t['impl'].split()[-1]} | "
          f"{t.get('step_s', float('nan')):.4f} | {t.get('tokens_per_s', float('nan')):,.0f} | "
          f"{t.get('mfu', float('nan')):.1%} | {t.get('peak_reserved_gib')} | "
          f"{t.get('loss', float('nan')):.4f} (mean) |")
    if mine in best and t.get("tokens_per_s"):
        print(f"Loom {mine} / torch {peer}: {best[mine] / t['tokens_per_s']:.2f}x")
for r, (b0, b1) in bubble.items():
    print(f"{r}: bubble (1 - compute kernels a step / step): rank 0 {b0:.1%}, rank 1 {b1:.1%}")
# Where the idle time goes (bench/kernel_times.cpp, the run's second half):
# waits under an NCCL kernel, and gaps with nothing running by length.
print("| run, rank | window s | compute | NCCL wait | gaps < 10 us (n) | 10-100 us (n) | "
      "0.1-1 ms (n) | >= 1 ms (n) |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    for k in (0, 1):
        try:
            g = json.loads(open(f"{out}/gaps-{r}.{k}.json").read())
        except Exception:
            continue
        w = g["window_s"]
        pct = lambda key: f"{g[key] / w:.1%}"  # noqa: E731
        print(f"| {r}, {k} | {w:.3f} | {pct('compute_s')} | {pct('nccl_wait_s')} | "
              f"{pct('gap_under_10us_s')} ({g['gaps_under_10us']}) | "
              f"{pct('gap_10_100us_s')} ({g['gaps_10_100us']}) | "
              f"{pct('gap_100us_1ms_s')} ({g['gaps_100us_1ms']}) | "
              f"{pct('gap_over_1ms_s')} ({g['gaps_over_1ms']}) |")
PY
