#!/usr/bin/env bash
# On a GPU host: a Llama-style model's training throughput, Loom's binary
# beside PyTorch eager (Hugging Face's LlamaForCausalLM, SDPA, bf16
# autocast, fused AdamW: bench/llama_torch.py) in one call, then where each
# spends its GPU time (Loom's kernels through CUPTI, bench/kernel_times.cpp;
# PyTorch's through torch.profiler). Issue 22's Llama row: 16 layers, d 2048,
# heads of 128.
#   here:  loomc --model llama:layers=16,d_model=2048,heads=16,vocab=32000,seq=1024,batch=8,ffn=8192 \
#            --target=cuda --precision=bf16 --compile-to=cpp -o .carry/llama/llama_bf16.cpp
#   there: bench/run-llama-vs-torch.sh     (PROFILE=0 skips the kernel tables)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=/tmp/llama-vs-torch; mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime
link_binary .carry/llama/llama_bf16.cpp /tmp/llama_bf16 -O1 || { echo "link failed"; exit 1; }
write_tokens 32000 /tmp/tok32k.bin
/tmp/llama_bf16 --data /tmp/tok32k.bin --steps 20 --seed 1 --log-json "$OUT/loom.jsonl" > "$OUT/loom.txt" 2>&1 ||
  echo "loom failed: $(tail -2 "$OUT/loom.txt")"
PROF=(); [ "${PROFILE:-1}" = 1 ] && PROF=(--profile)
python3 bench/llama_torch.py --steps 20 "${PROF[@]}" > "$OUT/eager.json" 2> "$OUT/eager.err" ||
  echo "eager failed: $(tail -2 "$OUT/eager.err")"
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
r = [json.loads(l) for l in open(out + "/loom.jsonl")]
loom_ms = statistics.median(x["step_ms"] for x in r[2:])
e = json.loads(open(out + "/eager.json").read().strip().splitlines()[-1])
tok = e["batch"] * e["seq"]
print("| implementation | ms/step | tokens/s | Loom / it |")
print("|---|---|---|---|")
print(f"| Loom | {loom_ms:.1f} | {tok / loom_ms * 1e3 / 1e3:.1f}k | 1.00x |")
print(f"| {e['impl']} (SDPA, fused AdamW) | {e['step_ms']:.1f} | {e['tokens_per_s'] / 1e3:.1f}k | "
      f"**{e['step_ms'] / loom_ms:.2f}x** |")
PY
[ "${PROFILE:-1}" = 1 ] || exit 0
CUDA=${CUDA_HOME:-/usr/local/cuda}
c++ -O2 -shared -fPIC bench/kernel_times.cpp -I"$CUDA/include" -L"$CUDA/lib64" -lcupti \
  -Wl,-rpath,"$CUDA/lib64" -o /tmp/libkt.so || { echo "kernel_times failed to build"; exit 1; }
for n in 3 6; do
  LD_PRELOAD=/tmp/libkt.so LOOM_KERNEL_TIMES="$OUT/loom$n.csv" \
    /tmp/llama_bf16 --data /tmp/tok32k.bin --steps $n --seed 1 > "$OUT/loom$n.txt" 2>&1
done
echo "== Loom (CUPTI), steps 4-6"
python3 - "$OUT/loom3.csv" "$OUT/loom6.csv" <<'PY'
import csv, sys
def read(p):
    return {r[0]: (int(r[1]), int(r[2])) for r in csv.reader(open(p))}
a, b = read(sys.argv[1]), read(sys.argv[2])
rows = [(b[k][1] - a.get(k, (0, 0))[1], b[k][0] - a.get(k, (0, 0))[0], k) for k in b]
rows = sorted((r for r in rows if r[0] > 0), reverse=True)
tot = sum(r[0] for r in rows)
print("total kernel time a step: %.1f ms" % (tot / 3e6))
print("| share | ms/step | calls/step | kernel |")
print("|---|---|---|---|")
for t, c, k in rows[:25]:
    print("| %.1f%% | %.2f | %.0f | %s |" % (100 * t / tot, t / 3e6, c / 3, k[:100]))
PY
echo "== PyTorch eager (torch.profiler), 3 steps"
grep -E "^total|^\|" "$OUT/eager.err"
