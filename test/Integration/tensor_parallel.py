"""Issue 47's CPU acceptance, first part: loomc --tensor-parallel on GPT
and Llama (grouped-query attention) generators, fp32, over 2 and 4 MPI
ranks, and 2-way tensor parallelism inside 2-way data parallelism, give the
losses of one rank with the same global batch within 1e-6 relative over 20
steps; a checkpointed run resumed on the same ranks gives the uninterrupted
run's losses exactly. Standard library only."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import noisy_pattern, parse_args, run, train  # noqa: E402

a = parse_args()
loomc = os.path.join(a.bin, "loomc")
STEPS, BOUND = 20, 1e-6
data = os.path.join(a.tmp, "tokens.bin")
noisy_pattern(data, 64, 20000)

MODELS = {
    "gpt": "gpt:layers=2,d_model=32,heads=4,vocab=64,seq=8,batch=4",
    # 8 query heads over 4 key/value heads: each rank of 4 keeps one group.
    "llama-gqa": "llama:layers=2,d_model=64,heads=8,kv_heads=4,ffn=96,vocab=64,seq=8,batch=4",
}


def compile_(name, spec, *flags):
    exe = os.path.join(a.tmp, name)
    run([loomc, "--model", spec, "--target=cpu", "-o", exe, *flags])
    return exe


def losses(log):
    return [s["loss"] for s in log if "loss" in s]


worst = 0.0
for model, spec in MODELS.items():
    ref = losses(train(compile_(model + "-1", spec), 1, data, STEPS,
                       os.path.join(a.tmp, model + "-1.jsonl")))
    print(f"{model}, one rank: loss {ref[0]:.6f} -> {ref[-1]:.6f}")
    runs = [(f"--tensor-parallel={t}", t, ["--topology", f"gpu={t}", f"--tensor-parallel={t}"])
            for t in (2, 4)]
    runs.append(("--tensor-parallel=2 inside 2 data-parallel ranks", 4,
                 ["--topology", "node=2,gpu=2", "--tensor-parallel=2"]))
    for label, ranks, flags in runs:
        name = f"{model}-{label.split()[0].split('=')[1]}-{ranks}"
        got = losses(train(compile_(name, spec, *flags), ranks, data, STEPS,
                           os.path.join(a.tmp, name + ".jsonl")))
        err = max(abs(x - y) / abs(y) for x, y in zip(got, ref))
        worst = max(worst, err)
        ok = len(got) == STEPS and err <= BOUND
        print(f"{model} {label} on {ranks} ranks: max relative difference {err:.2e} over "
              f"{len(got)} steps: {'ok' if ok else 'FAILED'}")

# Resume: 10 steps, a checkpoint, 10 more, against 20 straight.
exe = os.path.join(a.tmp, "gpt-2-2")
ck = os.path.join(a.tmp, "ck")
whole = losses(train(exe, 2, data, STEPS, os.path.join(a.tmp, "whole.jsonl")))
first = losses(train(exe, 2, data, 10, os.path.join(a.tmp, "p1.jsonl"), "--checkpoint-dir", ck,
                     "--checkpoint-every", "10"))
second = losses(train(exe, 2, data, 10, os.path.join(a.tmp, "p2.jsonl"), "--checkpoint-dir", ck,
                      "--resume"))
same = first + second == whole
print(f"gpt --tensor-parallel=2, resumed after 10 steps: "
      f"{'identical losses' if same else 'DIFFERENT losses: FAILED'}")
print(f"worst relative difference {worst:.2e} (bound {BOUND:g})")
