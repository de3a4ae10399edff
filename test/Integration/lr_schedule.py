#!/usr/bin/env python3
"""Learning-rate schedules of the training binary (issue 46): --lr-schedule
linear and cosine with warm-up (Hugging Face's get_linear_schedule_with_
warmup and get_cosine_with_min_lr_schedule_with_warmup, written here from
their definitions) against PyTorch: torch.optim.AdamW with a LambdaLR
stepped after each optimizer step, on the same GPT (loomtest.gpt, the
generator's initial weights) and data order, 20 steps.

Bounds: every step's loss within 1e-5 relative of PyTorch's float64 run
(the binary computes in float32: measured ~1e-7), and the "lr" the log
records is the rate PyTorch's scheduler gives that step (float32: 1e-6).
Gradient accumulation (--micro-batches) with clipping and the cosine
schedule against PyTorch's accumulated steps: losses within 1e-6. Also: 2
ranks at ZeRO-3 give one rank's losses within 1e-6, and a run
checkpointed after 10 steps and resumed with the same flags continues
with exactly the straight run's losses."""
import math
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import gpt, gpt_run_setup  # noqa: E402
from mpitest import train  # noqa: E402

KEYS = "layers=2,d_model=16,heads=2,vocab=32,seq=8,batch=8"
STEPS, LR, WD, WARMUP, DECAY, FLOOR = 20, 1e-2, 0.01, 5, 20, 0.1


def hf_linear(s):
    if s < WARMUP:
        return s / max(1, WARMUP)
    return max(0.0, (DECAY - s) / max(1, DECAY - WARMUP))


def hf_cosine(s):
    if s < WARMUP:
        return s / max(1, WARMUP)
    progress = (s - WARMUP) / max(1, DECAY - WARMUP)
    c = max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
    return c * (1 - FLOOR) + FLOOR


def torch_run(init, tokens, cfg, lam, clip=0.0, accum=1):
    """`accum` > 1: each step's batch as that many micro-batches, each
    loss / accum backward in turn (gradient accumulation), then one
    (clipped) step."""
    p = {k: v.double().clone().requires_grad_(True) for k, v in init.items()}
    opt = torch.optim.AdamW(p.values(), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    T, gbt, n = cfg["seq"], cfg["batch"] * cfg["seq"], len(tokens)
    losses, lrs, norms = [], [], []
    for s in range(STEPS):
        off = (s * gbt) % (n - gbt - 1)
        x = torch.tensor(tokens[off:off + gbt]).view(cfg["batch"], T)
        y = torch.tensor(tokens[off + 1:off + gbt + 1]).view(cfg["batch"], T)
        opt.zero_grad()
        rows = cfg["batch"] // accum
        loss = 0.0
        for m in range(accum):
            part = gpt(p, x[m * rows:(m + 1) * rows], y[m * rows:(m + 1) * rows],
                       {**cfg, "batch": rows}) / accum
            part.backward()
            loss = loss + part.detach()
        if clip:
            norms.append(torch.nn.utils.clip_grad_norm_(list(p.values()), clip).item())
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        losses.append(loss.item())
    return (losses, lrs, norms) if clip else (losses, lrs)


def main():
    a, cfg, data, tokens, init = gpt_run_setup(KEYS)
    loomc = os.path.join(a.bin, "loomc")

    def build(name, *flags):
        exe = os.path.join(a.tmp, name)
        subprocess.run([loomc, "--model", f"gpt:{KEYS}", f"--lr={LR}", f"--weight-decay={WD}",
                        *flags, "-o", exe], check=True, capture_output=True)
        return exe

    def as_one_rank(label, exe, flags, ours):
        """2 ranks of `exe` (`flags`) against one rank's losses `ours`."""
        dp = [r["loss"] for r in train(exe, 2, data, STEPS, exe + ".log", *flags)]
        close = len(dp) == STEPS and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(dp, ours))
        print(f"{label} {'within 1e-6' if close else 'NOT within 1e-6'} of one rank")
        return close

    one = build("one")
    z3 = build("z3", "--topology=gpu=2", "--zero-stage=3")
    bad = 0
    losses = {}
    for kind, lam, extra in (("linear", hf_linear, []),
                             ("cosine", hf_cosine, ["--min-lr-ratio", str(FLOOR)])):
        flags = ["--lr-schedule", kind, "--warmup-steps", str(WARMUP), "--decay-steps",
                 str(DECAY), *extra]
        log = train(one, 1, data, STEPS, one + f".{kind}.log", *flags)
        ours, lrs = [r["loss"] for r in log], [r["lr"] for r in log]
        losses[kind] = ours
        ref, ref_lrs = torch_run(init, tokens, cfg, lam)
        e = max(abs(o - r) / abs(r) for o, r in zip(ours, ref))
        el = max(abs(o - r) / max(r, 1e-30) if r else abs(o) for o, r in zip(lrs, ref_lrs))
        ok = len(ours) == STEPS and e <= 1e-5 and el <= 1e-6
        sys.stderr.write(f"{kind}: max rel loss error {e:.1e}, lr {el:.1e}\n")
        bad += not ok
        print(f"{kind}: losses {'within 1e-5' if e <= 1e-5 else 'NOT within 1e-5'} of PyTorch "
              f"(float64) over {STEPS} steps, the logged lr "
              f"{'is' if el <= 1e-6 else 'is NOT'} the scheduler's")
        if not ok:
            print(f"  {e:.2e} {el:.2e}\n  {ours}\n  {ref}\n  {lrs}\n  {ref_lrs}")
        bad += not as_one_rank(f"{kind}: 2 ranks at ZeRO-3", z3, flags, ours)
    # Clipping by global norm (loomc --clip-grad) under the cosine schedule:
    # torch.nn.utils.clip_grad_norm_ before each step; the logged grad_norm
    # is the norm it returns. ZeRO-0 and ZeRO-3 on 2 ranks as one rank.
    sched = ["--lr-schedule", "cosine", "--warmup-steps", str(WARMUP), "--decay-steps",
             str(DECAY), "--min-lr-ratio", str(FLOOR)]
    clip1 = build("clip1", "--clip-grad=0.5")
    log = train(clip1, 1, data, STEPS, clip1 + ".log", *sched)
    ours, norms = [r["loss"] for r in log], [r["grad_norm"] for r in log]
    ref, _, ref_norms = torch_run(init, tokens, cfg, hf_cosine, clip=0.5)
    e = max(abs(o - r) / abs(r) for o, r in zip(ours, ref))
    en = max(abs(o - r) / abs(r) for o, r in zip(norms, ref_norms))
    clipped = sum(r > 0.5 for r in ref_norms)
    ok = len(ours) == STEPS and e <= 1e-5 and en <= 1e-5 and clipped >= 5
    bad += not ok
    sys.stderr.write(f"clip: max rel loss error {e:.1e}, norm {en:.1e}, {clipped} steps clipped\n")
    print(f"clip 0.5: losses {'within 1e-5' if e <= 1e-5 else 'NOT within 1e-5'} of PyTorch's "
          f"clip_grad_norm_, the logged grad_norm {'is' if en <= 1e-5 else 'is NOT'} its norm")
    for stage in (0, 3):
        exe = build(f"clip-z{stage}", "--clip-grad=0.5", "--topology=gpu=2", f"--zero-stage={stage}")
        bad += not as_one_rank(f"clip 0.5: 2 ranks at ZeRO-{stage}", exe, sched, ours)
    # Gradient accumulation (loomc --micro-batches=2) with the clipping and
    # the schedule: PyTorch's two backward passes of half the rows, each
    # loss halved, then clip_grad_norm_ and one step; and 2 ranks at ZeRO-0
    # and ZeRO-3 (two micro-batches of 2 rows each) as one rank.
    acc1 = build("acc1", "--clip-grad=0.5", "--micro-batches=2")
    log = train(acc1, 1, data, STEPS, acc1 + ".log", *sched)
    ours, norms = [r["loss"] for r in log], [r["grad_norm"] for r in log]
    ref, _, ref_norms = torch_run(init, tokens, cfg, hf_cosine, clip=0.5, accum=2)
    e = max(abs(o - r) / abs(r) for o, r in zip(ours, ref))
    en = max(abs(o - r) / abs(r) for o, r in zip(norms, ref_norms))
    ok = len(ours) == STEPS and e <= 1e-6 and en <= 1e-5
    bad += not ok
    sys.stderr.write(f"accumulation: max rel loss error {e:.1e}, norm {en:.1e}\n")
    print(f"accumulation 2, clip 0.5, cosine: losses {'within 1e-6' if e <= 1e-6 else 'NOT within 1e-6'}"
          f" of PyTorch's accumulated steps, the logged grad_norm "
          f"{'is' if en <= 1e-5 else 'is NOT'} its norm")
    for stage in (0, 3):
        exe = build(f"acc-z{stage}", "--clip-grad=0.5", "--micro-batches=2", "--topology=gpu=2",
                    f"--zero-stage={stage}")
        bad += not as_one_rank(f"accumulation 2, clip 0.5: 2 ranks at ZeRO-{stage}", exe, sched,
                               ours)
    # A resume continues the schedule (it is a function of the step): the
    # cosine run above, in two halves.
    ck = os.path.join(a.tmp, "ck")
    first = [r["loss"] for r in train(one, 1, data, 10, one + ".a.log", *sched,
                                      "--checkpoint-dir", ck, "--checkpoint-every", "10")]
    second = [r["loss"] for r in train(one, 1, data, 10, one + ".b.log", *sched,
                                       "--checkpoint-dir", ck, "--resume")]
    same = first + second == losses["cosine"]
    bad += not same
    print(f"cosine, resumed after 10 steps: {'identical' if same else 'DIFFERENT'} losses")
    for flags in (["--lr-schedule", "cosine"], ["--warmup-steps", "3"],
                  ["--lr-schedule", "linear", "--decay-steps", "10", "--min-lr-ratio", "0.1"]):
        p = subprocess.run([one, "--data", data, "--steps", "1", *flags], capture_output=True,
                           text=True)
        print(f"refused ({p.returncode}): {p.stderr.strip()}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
