#!/usr/bin/env bash
# On a GPU host: where GPT-2 124M's bf16 step spends its GPU time, Loom's
# binary beside PyTorch eager (the same shape: 12 layers, d 768, vocab
# 50304, batch 16 x 1024), kernel by kernel, to tell what fusion (issue 22)
# has to win. Loom's kernels through CUPTI (bench/kernel_times.cpp: Nsight
# Systems is not installed there); PyTorch's through torch.profiler. Each prints its kernels' summed time over 3 steps after
# warm-up, largest first, with a total.
#   here:  loomc --model gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=16 \
#            --target=cuda --precision=bf16 --compile-to=cpp -o .carry/profile/gpt2_bf16.cpp
#   there: bench/profile-gpt2-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=/tmp/profile; mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime
link_binary .carry/profile/gpt2_bf16.cpp /tmp/gpt2_bf16 -O1
write_tokens 50257 /tmp/tok50k.bin
# Loom's kernels through CUPTI (bench/kernel_times.cpp, preloaded): a run
# of 3 steps and one of 8; the difference is 5 steps after warm-up.
build_kernel_times
echo "== Loom (CUPTI), steps 4-8 of 8"
for n in 3 8; do
  LD_PRELOAD=/tmp/libkt.so LOOM_KERNEL_TIMES="$OUT/loom$n.csv" \
    /tmp/gpt2_bf16 --data /tmp/tok50k.bin --steps $n --seed 1 > "$OUT/loom$n.txt" 2>&1
done
tail -2 "$OUT/loom8.txt" | head -1
python3 - "$OUT/loom3.csv" "$OUT/loom8.csv" <<'PY'
import csv, sys
def read(p):
    return {r[0]: (int(r[1]), int(r[2])) for r in csv.reader(open(p))}
a, b = read(sys.argv[1]), read(sys.argv[2])
rows = [(b[k][1] - a.get(k, (0, 0))[1], b[k][0] - a.get(k, (0, 0))[0], k) for k in b]
rows = [r for r in rows if r[0] > 0]
rows.sort(reverse=True)
tot = sum(r[0] for r in rows)
print("total kernel time over 5 steps: %.1f ms (%.1f ms a step)" % (tot / 1e6, tot / 5e6))
print("| share | ms/step | calls/step | kernel |")
print("|---|---|---|---|")
for t, c, k in rows[:30]:
    print("| %.1f%% | %.2f | %.0f | %s |" % (100 * t / tot, t / 5e6, c / 5, k[:110]))
PY
echo "== PyTorch eager (torch.profiler), 3 steps after 3 of warm-up"
python3 - <<'PY'
import sys, torch
sys.path.insert(0, "bench")
from gpt2_torch import GPT
torch.manual_seed(0)
m = GPT(vocab=50304).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=6e-4, weight_decay=0.01, fused=True)
x = torch.randint(0, 50257, (16, 1024), device="cuda"); y = torch.randint(0, 50257, (16, 1024), device="cuda")
def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(x, y)
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
for _ in range(3): step()
torch.cuda.synchronize()
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA]) as p:
    for _ in range(3): step()
    torch.cuda.synchronize()
ev = [e for e in p.key_averages() if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0) > 0]
key = lambda e: getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
ev.sort(key=key, reverse=True)
tot = sum(key(e) for e in ev)
print("total kernel time over 3 steps: %.1f ms (%.1f ms a step)" % (tot / 1e3, tot / 3e3))
print("| share | ms/step | calls/step | kernel |")
print("|---|---|---|---|")
for e in ev[:28]:
    print("| %.1f%% | %.2f | %.0f | %s |" % (100 * key(e) / tot, key(e) / 3e3, e.count / 3, e.key[:110]))
PY
