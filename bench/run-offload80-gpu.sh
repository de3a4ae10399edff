#!/usr/bin/env bash
# On a one-H200 host: issue 44's 80 GB rows (sources and predictions from
# bench/gen-offload80-gpu.sh, committed first). Every binary was compiled
# with --device-memory=80: it holds the card's memory beyond 80 GiB back
# before allocating anything. STEPS steps each (default 6), one after
# another (the CPU rows pin most of the host's memory). Then a table: the
# median step of steps 3 on, the prediction, pred/meas, the plan, the most
# the card reported in use (card_used_mib), and whether interleaved's
# losses equal cpu's at every step. PEERS=1 instead runs the PyTorch peers
# (FSDP2 + CPUOffloadPolicy, capped at 80 GiB) for ROWS' models.
#   ROWS="l71-cpu l71-int" bench/run-offload80-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
STEPS="${STEPS:-6}"
C=.carry/off80
mkdir -p "$OUT"
ROWS="${ROWS:-l71-cpu l71-int g625-cpu g625-int l67-cpu l67-int}"
export MASTER_ADDR=127.0.0.1
if [ -n "${PEERS:-}" ]; then
  source bench/launch.sh
  declare -A PEER=(
    [g625]="bench/fsdp2_offload.py --layers 30 --width 4096 --heads 32 --vocab 50304 --batch 2 --steps 4"
    [l71]="bench/fsdp2_llama.py --offload --layers 28 --d 4096 --heads 32 --ffn 14336 --vocab 32000 --batch 2 --steps 4"
    [l67]="bench/fsdp2_llama.py --offload --layers 32 --d 4096 --heads 32 --ffn 11008 --vocab 32000 --batch 2 --steps 4"
  )
  for m in $ROWS; do
    launch 1 "$OUT/peer-$m" timeout "${PEER_TIMEOUT:-280}" python3 ${PEER[$m]} --device-memory 80 ||
      { echo "peer $m failed:"; tail -n 3 "$OUT/peer-$m.0"; }
    grep -h '^{' "$OUT/peer-$m.0" | tail -1
  done
  exit 0
fi
source bench/gpu-runtime.sh
[ -n "${RT:-}" ] || build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
for r in $ROWS; do
  link_gz "$C/$r.cpp.gz" "/tmp/$r" &
done
[ -f /tmp/tok32k.bin ] || write_tokens 32000 /tmp/tok32k.bin 2_000_000
[ -f /tmp/tok50k.bin ] || write_tokens 50304 /tmp/tok50k.bin 2_000_000
wait
for r in $ROWS; do
  rm -f "$OUT/$r.jsonl"
  tok=/tmp/tok32k.bin; [[ $r == g* ]] && tok=/tmp/tok50k.bin
  timeout "${TIMEOUT:-200}" /usr/bin/time -f "%e s wall, %M KB host peak" "/tmp/$r" --data "$tok" \
    --steps "$STEPS" --seed 1 --log-json "$OUT/$r.jsonl" > "$OUT/$r.txt" 2>&1 ||
    echo "  $r failed: $(grep -v '^step' "$OUT/$r.txt" | tail -2 | tr '\n' ' ')"
  tail -1 "$OUT/$r.txt"
done
python3 - "$OUT" "$C" $ROWS <<'PY'
import json, re, statistics, sys
out, c, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
print("| row | measured s | predicted s (at the measured CPU rate after --replan) | pred/meas | card used GiB (max) | plan |")
print("|---|---|---|---|---|---|")
meas, losses = {}, {}
for r in rows:
    pred = open(f"{c}/{r}.predicted.txt").read()
    p = float(re.search(r": ([0-9.]+) s \(last gradient", pred)[1])
    plan = re.search(r"offload plan: (.*)", pred)
    try:
        lines = [json.loads(l) for l in open(f"{out}/{r}.jsonl")]
        log = [s for s in lines if "event" not in s]
        # A re-planned run (loomc --replan): the step predicted at the rate
        # the binary measured, for the plan it continued under, and the
        # steps timed under that plan: from the second step after the
        # decision (the binary's --replan-after, default 5).
        ev = [s for s in lines if s.get("event") == "replan"]
        rp = re.findall(r"replan after step (\d+): .*?predicted step: (.*?); (kept|continuing)",
                        open(f"{out}/{r}.txt").read())
        if rp:
            plans = re.findall(r"([0-9.e+-]+) s \(([^)]*)\)( \*)?", rp[0][1])
            p = float(next(x for x in plans if x[2])[0])
        m = statistics.median(s["step_ms"] for s in log[int(rp[0][0]) + 1 if rp else 2:]) / 1000
    except Exception:
        print(f"| {r} | failed | {p:.3f} | | | |")
        continue
    meas[r], losses[r] = m, [s["loss"] for s in log]
    used = max(s.get("card_used_mib", float("nan")) for s in log) / 1024
    print(f"| {r} | {m:.3f} | {p:.3f} | {p / m:.2f} | {used:.1f} | {plan[1] if plan else 'all on the CPU'} |")
for model in ("g625", "l71", "l67"):
    a, b = f"{model}-cpu", f"{model}-int"
    if a in meas and b in meas:
        same = losses[a] == losses[b]
        print(f"{model}: interleaved vs cpu {meas[a] / meas[b]:.2f}x; losses "
              f"{'identical at every step' if same else 'DIFFER'}: cpu {losses[a]} int {losses[b]}")
PY
