"""Gradient accumulation (loomc --micro-batches=M, loom-micro-batches) on
CPU ranks, fp32: GPT and Llama generators with each rank's batch in 2 and 4
micro-batches give the losses of one step on the whole batch within 1e-6
relative over 20 steps, with and without --recompute, and inside 2-way data
parallelism at ZeRO-1 and ZeRO-3; bf16 within 1e-3 of one bf16 step. An
ONNX export's batch is one micro-batch: with M=2 one rank reads two
exports' batches a step and trains like 2 data-parallel ranks. Resume is
exact; a batch that does not divide is refused. Standard library only."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import (LossCheck, compiler, losses, noisy_pattern, parse_args,  # noqa: E402
                     train)

a = parse_args()
zoo = os.path.join(os.path.dirname(a.tmp), "zoo")  # the extracted test/Zoo/zoo.tgz
loomc = os.path.join(a.bin, "loomc")
compile_ = compiler(loomc, a.tmp)
STEPS, BOUND = 20, 1e-6
data = os.path.join(a.tmp, "tokens.bin")
noisy_pattern(data, 64, 20000)
MODELS = {
    "gpt": "gpt:layers=2,d_model=32,heads=4,vocab=64,seq=8,batch=8",
    "llama": "llama:layers=2,d_model=64,heads=8,kv_heads=4,ffn=96,vocab=64,seq=8,batch=8",
}
check = LossCheck(STEPS, BOUND)
compare = check.compare


def trained(name, spec, ranks, *flags):
    exe = compile_(name, spec, *flags)
    return losses(train(exe, ranks, data, STEPS, os.path.join(a.tmp, name + ".jsonl")))


for model, spec in MODELS.items():
    ref = trained(model + "-1", spec, 1)
    print(f"{model}, one rank, batch 8: loss {ref[0]:.6f} -> {ref[-1]:.6f}")
    runs = [(f"--micro-batches={m}", 1, [f"--micro-batches={m}"]) for m in (2, 4)]
    runs += [(f"--micro-batches=2 --recompute={r}", 1, ["--micro-batches=2", f"--recompute={r}"])
             for r in ("full", "selective")]
    runs += [(f"--micro-batches=2 inside 2 data-parallel ranks, ZeRO-{z}", 2,
              ["--micro-batches=2", "--topology", "gpu=2", f"--zero-stage={z}"]) for z in (1, 3)]
    for label, ranks, flags in runs:
        name = f"{model}-" + "".join(f.strip("-").replace("=", "") for f in flags)
        compare(f"{model} {label} on {ranks} rank{'s' if ranks > 1 else ''}",
                trained(name, spec, ranks, *flags), ref)

# Composes with tensor parallelism (its forward's collectives and their
# waits are copied with each micro-batch), the optimizer's offload and
# gradient clipping (the clipped reference clips too).
spec = MODELS["llama"]
ref = losses(train(os.path.join(a.tmp, "llama-1"), 1, data, STEPS,
                   os.path.join(a.tmp, "llama-again.jsonl")))
for label, ranks, flags in (
        ("--tensor-parallel=2", 2, ["--topology", "gpu=2", "--tensor-parallel=2"]),
        ("--tensor-parallel=2 --sequence-parallel", 2,
         ["--topology", "gpu=2", "--tensor-parallel=2", "--sequence-parallel"]),
        ("--optimizer-offload=interleaved", 1, ["--optimizer-offload=interleaved"])):
    name = "llama-m2" + "".join(f.strip("-").replace("=", "") for f in flags)
    compare(f"llama --micro-batches=2 {label} on {ranks} rank{'s' if ranks > 1 else ''}",
            trained(name, spec, ranks, "--micro-batches=2", *flags), ref)
compare("llama --micro-batches=2 --clip-grad=0.5 on 1 rank",
        trained("llama-m2-clip", spec, 1, "--micro-batches=2", "--clip-grad=0.5"),
        trained("llama-clip", spec, 1, "--clip-grad=0.5"))

# The order changes no arithmetic: GPipe's order gives the 1F1B order's
# losses bit for bit.
onef = losses(train(os.path.join(a.tmp, "gpt-micro-batches4"), 1, data, STEPS,
                    os.path.join(a.tmp, "order-1f1b.jsonl")))
gp = trained("gpt-m4-gpipe", MODELS["gpt"], 1, "--micro-batches=4", "--pipeline-schedule=gpipe")
print(f"gpt --micro-batches=4 --pipeline-schedule=gpipe against 1f1b: "
      f"{'identical losses' if onef == gp and len(gp) == STEPS else 'DIFFERENT losses: FAILED'}")

# bf16 (fp32 master weights): each micro-batch's bf16 products round as
# one step's do, but the parameter gradients are summed in another order.
compare("llama --precision=bf16 --micro-batches=4 on 1 rank",
        trained("bf16-m4", spec, 1, "--precision=bf16", "--micro-batches=4"),
        trained("bf16-1", spec, 1, "--precision=bf16"), bound=1e-3)

# An export's batch (2 x 16) is one micro-batch: M=2 on one rank reads the
# 4 rows 2 data-parallel ranks read, and trains like them.
data128 = os.path.join(a.tmp, "tokens128.bin")
noisy_pattern(data128, 128, 20000)
onnx = os.path.join(zoo, "gpt2.onnx")
flags = ["--task=lm", "--init=random"]
ref = losses(train(compile_("gpt2-dp2", onnx, *flags, "--topology", "gpu=2"), 2, data128, STEPS,
                   os.path.join(a.tmp, "gpt2-dp2.jsonl")))
got = losses(train(compile_("gpt2-m2", onnx, *flags, "--micro-batches=2"), 1, data128, STEPS,
                   os.path.join(a.tmp, "gpt2-m2.jsonl")))
compare("gpt2.onnx --micro-batches=2 on 1 rank against 2 data-parallel ranks", got, ref)

# Resume: 10 steps, a checkpoint, 10 more, against 20 straight.
exe, ck = os.path.join(a.tmp, "gpt-micro-batches4"), os.path.join(a.tmp, "ck")
log = lambda part: os.path.join(a.tmp, f"resume.{part}.jsonl")  # noqa: E731
whole = losses(train(exe, 1, data, STEPS, log("whole")))
first = losses(train(exe, 1, data, 10, log("p1"), "--checkpoint-dir", ck, "--checkpoint-every",
                     "10"))
second = losses(train(exe, 1, data, 10, log("p2"), "--checkpoint-dir", ck, "--resume"))
print(f"gpt --micro-batches=4, resumed after 10 steps: "
      f"{'identical losses' if first + second == whole else 'DIFFERENT losses: FAILED'}")

# A batch that does not divide: one line, no binary.
bad = subprocess.run([loomc, "--model", MODELS["gpt"], "--target=cpu", "--micro-batches=3",
                      "-o", os.path.join(a.tmp, "bad")], capture_output=True, text=True)
print(f"--micro-batches=3 of batch 8: exit {bad.returncode}: {bad.stderr.strip()}")
print(f"worst relative difference {check.worst:.2e} (bound {BOUND:g})")
