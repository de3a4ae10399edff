#!/usr/bin/env python3
"""Expert parallelism (issue 52) on CPU ranks: `loomc --expert-parallel=N`
splits each mixture-of-experts layer's experts (8 here, top-2) over the N
ranks of the innermost --topology level, the tokens moving to their
experts and back by two all-to-alls. With every rank reading its own rows, a dropless
model without the load-balancing loss trains as one rank on the global
batch: EP=2 (ZeRO-0), EP=4 (ZeRO-1) and EP=2 x 2 data-parallel replicas
(ZeRO-3 over the other parameters) each give the one-rank losses within
1e-6 relative over 10 steps, and so does EP=2 with 2 micro-batches. With a capacity factor and the
load-balancing loss (each rank routes and balances its own tokens, as
under data parallelism) EP=2 gives plain data parallelism's losses and
logged expert counts (also with a shared expert, which every rank runs on
its own tokens like any replicated layer, and the router z-loss), and with
--clip-grad its gradient norms. A run
checkpointed after 5 steps and resumed is
exact, and loom-ckpt exports the split experts back under their names,
equal to the data-parallel run's parameters. Standard library only."""
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import (LossCheck, compiler, losses, noisy_pattern, parse_args,  # noqa: E402
                     train)

a = parse_args()
STEPS, BOUND = 10, 1e-6
data = os.path.join(a.tmp, "tokens.bin")
noisy_pattern(data, 64, 20000)
compile_ = compiler(os.path.join(a.bin, "loomc"), a.tmp)
MOE = "moe:layers=2,d_model=32,heads=4,vocab=64,seq=8,batch=4,ffn=48,experts=8,top_k=2"
check = LossCheck(STEPS, BOUND)
bad = 0

onelog = train(compile_("one", MOE + ",aux=0"), 1, data, STEPS, os.path.join(a.tmp, "one.json"))
one = losses(onelog)
print(f"one rank, dropless, no aux: loss {one[0]:.6f} -> {one[-1]:.6f}")
for ep, topo, stage in ((2, "gpu=2", 0), (4, "gpu=4", 1), (2, "node=2,gpu=2", 3)):
    ranks = 4 if topo.startswith("node") or ep == 4 else 2
    tag = f"ep{ep}-{topo.replace(',', '-').replace('=', '')}-z{stage}"
    exe = compile_(tag, MOE + ",aux=0", f"--expert-parallel={ep}", f"--topology={topo}",
                   f"--zero-stage={stage}")
    got = losses(train(exe, ranks, data, STEPS, os.path.join(a.tmp, tag + ".json")))
    check.compare(f"EP={ep} on --topology={topo}, ZeRO-{stage}", got, one)

# Micro-batches: each copy of the forward exchanges its own tokens.
exe = compile_("ep2-mb2", MOE + ",aux=0", "--expert-parallel=2", "--micro-batches=2")
check.compare("EP=2 with --micro-batches=2", losses(train(exe, 2, data, STEPS,
                                                          os.path.join(a.tmp, "ep2-mb2.json"))), one)

# --plan=auto on a mixture of experts searches the expert-parallel plans
# beside the others (loomc's step simulation on cpu-host); whichever it
# chooses trains as one rank.
rep = os.path.join(a.tmp, "plan.json")
exe = compile_("auto", MOE + ",aux=0", "--topology=gpu=2", "--hardware=cpu-host", "--plan=auto",
               f"--plan-report={rep}")
report = json.load(open(rep))
eps = sum(any(f.startswith("--expert-parallel=") for f in c["flags"]) and c.get("ok", False)
          for c in report["candidates"])
print(f"--plan=auto: {eps} expert-parallel plans predicted among {len(report['candidates'])}; "
      f"chose {' '.join(report['chosen']['flags']) or '(the defaults)'}")
bad += eps == 0
check.compare("the plan --plan=auto chose", losses(train(exe, 2, data, STEPS,
                                                           os.path.join(a.tmp, "auto.json"))), one)

# The log's metrics under micro-batches: each expert's token count summed
# over the micro-batches (loom.metric_sum), so one rank with 2 micro-batches
# logs the counts of one micro-batch of the whole batch, exactly.
mblog = train(compile_("one-mb2", MOE + ",aux=0", "--micro-batches=2"), 1, data, STEPS,
              os.path.join(a.tmp, "one-mb2.json"))
key = "model.layers.1.block_sparse_moe.expert_tokens"
same = [x["metrics"][key] == y["metrics"][key] for x, y in zip(mblog, onelog) if "loss" in x]
print(f"one rank, --micro-batches=2: the logged expert counts "
      f"{'are' if len(same) == STEPS and all(same) else 'are NOT'} the whole batch's")
bad += not (len(same) == STEPS and all(same))

# Capacity and the load-balancing loss: each rank's routing is its own,
# so the peer is data parallelism on the same ranks.
CAP = MOE + ",capacity=1.25,aux=0.01,shared=24,z=0.001"
dp = train(compile_("dp-cap", CAP, "--topology=gpu=2"), 2, data, STEPS,
           os.path.join(a.tmp, "dp-cap.json"))
epl = train(compile_("ep-cap", CAP, "--expert-parallel=2"), 2, data, STEPS,
            os.path.join(a.tmp, "ep-cap.json"))
check.compare("EP=2, capacity 1.25, aux 0.01, a shared expert and the z-loss, against 2 "
              "data-parallel ranks",
              losses(epl), losses(dp))
same_metrics = all(x.get("metrics") == y.get("metrics") for x, y in zip(epl, dp) if "loss" in x)
counts = epl[0]["metrics"]["model.layers.0.block_sparse_moe.expert_tokens"]
print(f"the log's metrics: expert tokens of layer 0 {counts}, aux loss "
      f"{epl[0]['metrics']['moe.aux_loss']:.4f}, z-loss {epl[0]['metrics']['moe.z_loss']:.4f}: "
      f"{'as data parallelism logs them' if same_metrics else 'DIFFERENT'}")
bad += not same_metrics

# Clipping by the global norm: the experts' squares summed over their
# level, the shared parameters' over the world (ZeRO-3's shards): the norm
# and losses of plain data parallelism.
CLIP = ["--clip-grad=0.05"]
dpc = train(compile_("dp-clip", MOE + ",aux=0", "--topology=gpu=2", *CLIP), 2, data, STEPS,
            os.path.join(a.tmp, "dp-clip.json"))
epc = train(compile_("ep-clip", MOE + ",aux=0", "--expert-parallel=2", "--topology=node=2,gpu=2",
                     "--zero-stage=3", *CLIP), 4, data, STEPS, os.path.join(a.tmp, "ep-clip.json"))
check.compare("EP=2 x 2 replicas, ZeRO-3, --clip-grad=0.05, against 2 data-parallel ranks",
              losses(epc), losses(dpc))
norms = [(x["grad_norm"], y["grad_norm"]) for x, y in zip(epc, dpc) if "grad_norm" in x]
norm_err = max((abs(x - y) / y for x, y in norms), default=1.0)
print(f"the clipped runs' gradient norms ({norms[0][1]:.3f} at step 1, above 0.05): largest "
      f"relative difference {norm_err:.1e}: {'ok' if norm_err <= BOUND else 'WRONG'}")
bad += norm_err > BOUND or len(norms) != STEPS

# Checkpointed after 5 steps and resumed for 5 more: the uninterrupted run.
exe = os.path.join(a.tmp, "ep2-gpu2-z0")
ck = os.path.join(a.tmp, "ck")
first = losses(train(exe, 2, data, STEPS // 2, os.path.join(a.tmp, "r1.json"),
                     "--checkpoint-dir", ck, "--checkpoint-every", str(STEPS // 2)))
second = losses(train(exe, 2, data, STEPS // 2, os.path.join(a.tmp, "r2.json"),
                      "--checkpoint-dir", ck, "--resume"))
straight = losses(train(exe, 2, data, STEPS, os.path.join(a.tmp, "r0.json")))
same = first + second == straight
print(f"EP=2, resumed after {STEPS // 2} steps: {'identical losses' if same else 'DIFFERENT'}")
bad += not same


def read_f32(path):
    """{name: list of floats} of a safetensors file of F32 tensors."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        out[name] = struct.unpack(f"<{(end - b) // 4}f", raw[8 + n + b:8 + n + end])
    return out


# loom-ckpt puts the experts back together: the same names and values as
# a data-parallel run's checkpoint after the same 5 steps.
dpexe = compile_("dp2", MOE + ",aux=0", "--topology=gpu=2")
dck = os.path.join(a.tmp, "dck")
train(dpexe, 2, data, STEPS // 2, os.path.join(a.tmp, "d1.json"), "--checkpoint-dir", dck,
      "--checkpoint-every", str(STEPS // 2))
tools = os.path.join(a.bin, "loom-ckpt")
for src, out in ((ck, "ep.safetensors"), (dck, "dp.safetensors")):
    subprocess.run([tools, "export", src, "-o", os.path.join(a.tmp, out), "--verify"],
                   check=True, capture_output=True)
e, d = read_f32(os.path.join(a.tmp, "ep.safetensors")), read_f32(os.path.join(a.tmp, "dp.safetensors"))
diff = max((abs(x - y) for k in d if k in e for x, y in zip(e[k], d[k])), default=1.0)
exported = sorted(e) == sorted(d) and diff <= 1e-6
print(f"loom-ckpt export of EP=2: {len(e)} tensors, experts under their names; largest "
      f"difference from data parallelism's {diff:.1e}: {'ok' if exported else 'WRONG'}")
bad += not exported
print(f"worst relative difference {check.worst:.2e} (bound {BOUND:g})")
if check.worst > BOUND or bad:
    sys.exit(1)
