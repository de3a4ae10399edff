#!/usr/bin/env python3
"""1-bit Adam end to end on CPU ranks (Open MPI): `loomc --optimizer=onebit-adam
--freeze-step=F --topology=rank=R` against

  1. the same model with `--optimizer=adamw` (weight decay 0, where AdamW is
     Adam): the steps before the freeze give the same losses (bound 1e-7
     relative: the same code runs);
  2. a float64 PyTorch implementation of the algorithm written here from
     DeepSpeed's OnebitAdam and compressed_allreduce (not from Loom's code):
     R ranks emulated in one process, each with its own rows of the global
     batch, momentum update, worker error and server error, the padding to
     R * lcm(R, 8), scale = ||x||/sqrt(n), sign(0) = +1. Sign compression
     is chaotic in the last bit: a momentum element within rounding of 0
     takes the other sign in float32, which moves its update by two
     scales, and the same reference run in float32 drifts from the float64
     one by up to 2e-3 within 8 compressed steps. So Loom is held to what
     the algorithm itself gives in float32: the loss after the first
     compressed update, and the momentum after two (both error buffers in
     use: its per-tensor scales and the share of equal signs), each within
     3x (the loss 4x) the larger distance of two float32 references (the
     moments as a lerp and as a multiply-add) from the float64 one (floors 1e-6,
     1e-5, 0.1% of signs); every step's loss within 1e-2 (a gross error: a
     lost error buffer, a wrong chunk, moves it more);
  3. bytes: every step after the freeze sends at most 1/16 of the bytes of
     a step before it (fp32 gradient all-reduce);
  4. checkpoint + resume across the freeze (the error buffers are state):
     the resumed run's losses equal the uninterrupted run's bit for bit;
  5. ZeRO stages 1 and 2 (both --onebit-variance placements): the losses
     of stage 0 within 1e-6, and stage 1 resumed at the freeze step and
     after it bitwise equal to its uninterrupted run.

Then, with --converge, 300 steps on the GPL-3 text, 6 seeds: the final loss
(the last 20 steps), paired by seed, no more than 1% above the uncompressed
AdamW runs' on average.
    onebit_adam.py --bin BIN --tmp TMP [--converge]
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import gpt, gpt_run_setup, read_st  # noqa: E402
from mpitest import run, train  # noqa: E402

KEYS = "layers=2,d_model=32,heads=2,vocab=64,seq=16,batch=4"
LR, B1, B2, EPS = 3e-3, 0.9, 0.999, 1e-8
FREEZE, STEPS = 4, 12
SEEDS = 6  # of the --converge run


def compile_(a, name, ranks, *flags, keys=KEYS):
    exe = os.path.join(a.tmp, name)
    run([os.path.join(a.bin, "loomc"), "--model", f"gpt:{keys}", f"--lr={LR}",
         "--weight-decay=0", f"--topology=rank={ranks}", *flags, "-o", exe])
    return exe


def sign(x):
    return torch.where(x >= 0, 1.0, -1.0).to(x.dtype)


def refresh_schedule(t, freeze, k):
    """--variance-refresh=K, written here from its description (loomc
    --help, docs/compression.md), not from Loom's code: optimizer steps
    (from 1) freeze + K, + 2K, + 4K, ... refresh the variance. Returns
    whether step t does, and the last step that updated v before t."""
    last, nxt, gap = freeze, freeze + k, k
    while nxt < t:
        last, gap = nxt, gap * 2
        nxt += gap
    return nxt == t, last


def reference(params, tokens, ranks, steps, freeze, cfg, dtype=torch.float64, form="lerp",
              refresh=0):
    """1-bit Adam as DeepSpeed computes it (onebit/adam.py; comm/nccl.py
    compressed_allreduce), with Loom's Adam (bias-corrected AdamW, as
    torch.optim.AdamW) before the freeze and its bias correction of v kept
    at the freeze step after it. With `refresh` K, the steps of
    refresh_schedule run Adam on the averaged gradient with v standing for
    the k steps since its last update (v = b2^k v + (1 - b2^k) g^2, bias
    correction at the step itself), and the compressed steps after one
    keep their bias correction at it. Returns the reported (rank-mean)
    losses and, per rank, the state a checkpoint holds after the last
    step."""
    p = {k: v.to(dtype).clone().requires_grad_() for k, v in params.items()}
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v = {k: torch.zeros_like(x) for k, x in p.items()}
    unit = ranks * math.lcm(ranks, 8)
    pad = {k: (x.numel() + unit - 1) // unit * unit for k, x in p.items()}
    we = {(k, r): torch.zeros(pad[k], dtype=dtype) for k in p for r in range(ranks)}
    se = {(k, r): torch.zeros(pad[k] // ranks, dtype=dtype) for k in p for r in range(ranks)}
    b, T = cfg["batch"] // ranks, cfg["seq"]
    gbt, n = cfg["batch"] * T, len(tokens)
    losses = []
    for s in range(steps):
        off = (s * gbt) % (n - gbt - 1)
        grads, ls = [], []
        for r in range(ranks):
            mine = off + r * b * T
            x = torch.tensor(tokens[mine:mine + b * T]).view(b, T)
            y = torch.tensor(tokens[mine + 1:mine + b * T + 1]).view(b, T)
            for q in p.values():
                q.grad = None
            loss = gpt(p, x, y, cfg)
            loss.backward()
            grads.append({k: q.grad.detach().clone() for k, q in p.items()})
            ls.append(loss.item())
        losses.append(sum(ls) / ranks)
        t = s + 1
        bc1 = 1 - B1 ** t
        with torch.no_grad():
            full, last = (s < freeze), freeze
            if not full and refresh:
                full, last = refresh_schedule(t, freeze, refresh)
            b2 = B2 ** (t - last) if s >= freeze else B2
            for k, q in p.items():
                if full:
                    g = sum(gr[k] for gr in grads) / ranks
                    if form == "lerp":
                        m[k] = m[k] + (1 - B1) * (g - m[k])
                    else:
                        m[k] = B1 * m[k] + (1 - B1) * g
                    v[k] = b2 * v[k] + (1 - b2) * g * g
                    bc2 = 1 - B2 ** t
                else:
                    N, C = pad[k], pad[k] // ranks
                    scaled = []
                    for r in range(ranks):
                        mr = (m[k] * B1 + grads[r][k] * (1 - B1)).flatten()
                        c = torch.cat([mr, torch.zeros(N - mr.numel(), dtype=dtype)]) + we[k, r]
                        scale = c.norm() / math.sqrt(N)
                        we[k, r] = c - scale * sign(c)
                        scaled.append(scale * sign(c))
                    out = []
                    for j in range(ranks):  # rank j is the server of chunk j
                        c = sum(w[j * C:(j + 1) * C] for w in scaled) / ranks + se[k, j]
                        scale = c.norm() / math.sqrt(C)
                        se[k, j] = c - scale * sign(c)
                        out.append(scale * sign(c))
                    m[k] = torch.cat(out)[:q.numel()].view_as(q)
                    bc2 = 1 - B2 ** last
                q -= LR / bc1 * m[k] / (v[k].sqrt() / math.sqrt(bc2) + EPS)
    state = [{} for _ in range(ranks)]
    for r in range(ranks):
        for k, q in p.items():
            state[r][k] = q.detach()
            state[r][k + ".exp_avg"] = m[k]
            state[r][k + ".onebit.worker_error"] = we[k, r]
            state[r][k + ".onebit.server_error"] = se[k, r]
    return losses, state


def variance_refresh(a, cfg, data, tokens, params, ranks, before, after):
    """--variance-refresh=2 after the freeze at 4: optimizer steps 6 and 10
    run Adam on the full-precision average (the bytes of a warm-up step),
    the others the compressed step; the loss after the first refresh
    against the float64 reference within 4x float32's own distance (as the
    first compressed update), and every step within 3x the float32
    references' largest distance (floor 1e-4): measured 2026-11-30, Loom
    6.6e-5 and float32 3.1e-4, where leaving the refresh out moves the
    losses 3.6e-3 to 1.6e-2 (a refresh that does nothing fails)."""
    exe = compile_(a, f"onebit-r2-np{ranks}", ranks, "--optimizer=onebit-adam",
                   f"--freeze-step={FREEZE}", "--variance-refresh=2")
    r = train(exe, ranks, data, STEPS, exe + ".jsonl")
    lo = [x["loss"] for x in r]
    ref, _ = reference(params, tokens, ranks, STEPS, FREEZE, cfg, refresh=2)
    refs32 = [reference(params, tokens, ranks, STEPS, FREEZE, cfg, torch.float32, f, refresh=2)[0]
              for f in ("lerp", "muladd")]
    rel = lambda x, y: abs(x - y) / abs(y)
    k = 6  # the loss after the first refresh (optimizer step 6, run step 5)
    first, first32 = rel(lo[k], ref[k]), max(rel(x[k], ref[k]) for x in refs32)
    err = max(rel(x, y) for x, y in zip(lo, ref))
    err32 = max(rel(x, y) for r32 in refs32 for x, y in zip(r32, ref))
    full = [i for i, x in enumerate(r) if x["comm_bytes"] == before]
    ok = (full == [0, 1, 2, 3, 5, 9] and first <= max(2e-5, 4 * first32) and
          err <= max(1e-4, 3 * err32) and
          all(r[i]["comm_bytes"] == after for i in range(FREEZE, STEPS) if i not in (5, 9)))
    print(f"{ranks} ranks, --variance-refresh=2: full-precision steps {full} (want [0, 1, 2, 3, "
          f"5, 9]); after the first refresh {first:.1e} from the float64 reference (float32 "
          f"references up to {first32:.1e}); every step {err:.1e} (float32 {err32:.1e}) "
          f"{'ok' if ok else 'FAIL'}")
    return [] if ok else ["variance refresh"]


def main():
    a, cfg, data, tokens, params = gpt_run_setup(KEYS, "converge")
    bad = []
    for ranks in (2, 4):
        adam = compile_(a, f"adamw-np{ranks}", ranks, "--optimizer=adamw")
        onebit = compile_(a, f"onebit-np{ranks}", ranks, "--optimizer=onebit-adam",
                          f"--freeze-step={FREEZE}")
        ra = train(adam, ranks, data, STEPS, adam + ".jsonl")
        ro = train(onebit, ranks, data, STEPS, onebit + ".jsonl")
        la, lo = [x["loss"] for x in ra], [x["loss"] for x in ro]
        warm = max(abs(x - y) / abs(y) for x, y in zip(lo[:FREEZE + 1], la[:FREEZE + 1]))
        ref, _ = reference(params, tokens, ranks, STEPS, FREEZE, cfg)
        # Two float32 references, Adam's moments as a lerp and as a
        # multiply-add: both are correct float32, and which near-zero
        # momenta round to which sign differs between them (2 ranks: the
        # first compressed update 6.4e-6 and 2.4e-5 from float64, the
        # momentum scales 8.3e-4 and 2.8e-3). Loom is held to the larger
        # of the two: the bound is the noise of float32, not one sample
        # of it (an implementation that drops either error buffer is at
        # 0.12-0.44 in scale, 29-80% equal signs).
        forms = ("lerp", "muladd")
        refs32 = [reference(params, tokens, ranks, STEPS, FREEZE, cfg, torch.float32, f)[0]
                  for f in forms]
        rel = lambda x, y: abs(x - y) / abs(y)
        err = max(rel(x, y) for x, y in zip(lo, ref))
        k = FREEZE + 1  # the loss after the first compressed update
        first, first32 = rel(lo[k], ref[k]), max(rel(r[k], ref[k]) for r in refs32)
        # The momentum after two compressed steps (the second compression
        # starts from both error buffers): each element is a server scale
        # times a sign. Per tensor, the mean magnitude (the scales) and the
        # share of equal signs, Loom's and the float32 reference's against
        # the float64 one. The attention's bias is left out: its key third
        # has an exactly-zero gradient in exact arithmetic, rounding noise
        # in practice, so 1-bit Adam moves it at random (DeepSpeed's
        # exp_avg_mask note); it does not change the loss.
        ck2 = os.path.join(a.tmp, f"state-np{ranks}")
        train(onebit, ranks, data, FREEZE + 2, onebit + ".s.jsonl", "--checkpoint-dir", ck2,
              "--checkpoint-every", str(FREEZE + 2))
        _, st64 = reference(params, tokens, ranks, FREEZE + 2, FREEZE, cfg)
        st32s = [reference(params, tokens, ranks, FREEZE + 2, FREEZE, cfg, torch.float32, f)[1]
                 for f in forms]

        def momentum_distance(states):
            scale, signs = 0.0, 1.0
            for r in range(ranks):
                for name, want in st64[r].items():
                    if not name.endswith(".exp_avg") or "c_attn.bias" in name:
                        continue
                    got, want = states[r][name].double().flatten(), want.flatten()
                    scale = max(scale, rel(got.abs().mean().item(), want.abs().mean().item()))
                    signs = min(signs, (got.sign() == want.sign()).double().mean().item())
            return scale, signs
        parts = [read_st(os.path.join(ck2, f"step-{FREEZE + 2}.rank{r}-of-{ranks}.safetensors"))
                 for r in range(ranks)]
        scale, signs = momentum_distance(parts)
        d32 = [momentum_distance(st) for st in st32s]
        scale32, signs32 = max(d[0] for d in d32), min(d[1] for d in d32)
        before = min(x["comm_bytes"] for x in ro[:FREEZE])
        after = max(x["comm_bytes"] for x in ro[FREEZE:])
        # Checkpoints every 3 steps (the first one before the freeze), a
        # stop after FREEZE + 3 steps, a resume for the rest.
        ck = os.path.join(a.tmp, f"ckpt-np{ranks}")
        part1 = train(onebit, ranks, data, FREEZE + 3, onebit + ".p1.jsonl",
                      "--checkpoint-dir", ck, "--checkpoint-every", "3")
        part2 = train(onebit, ranks, data, STEPS - FREEZE - 3, onebit + ".p2.jsonl",
                      "--checkpoint-dir", ck, "--checkpoint-every", "3", "--resume")
        resumed = [x["loss"] for x in part1 + part2]
        # ZeRO 1 and 2: the losses of stage 0 (bound 1e-6; the same
        # arithmetic on shards), both placements of the frozen variance;
        # resumes at stage 1 from the freeze step itself (@enter_frozen
        # gathers the momentum) and from after it (the checkpoint has it).
        zero, zbytes = 0.0, {}
        for stage, var in ((1, "sharded"), (2, "sharded"), (1, "replicated")):
            exe = compile_(a, f"onebit-z{stage}{var[0]}-np{ranks}", ranks,
                           "--optimizer=onebit-adam", f"--freeze-step={FREEZE}",
                           f"--zero-stage={stage}", f"--onebit-variance={var}")
            rz = train(exe, ranks, data, STEPS, exe + ".jsonl")
            zero = max([zero] + [rel(x["loss"], y) for x, y in zip(rz, lo)])
            zbytes[stage, var] = rz[-1]["comm_bytes"]
            if (stage, var) == (1, "sharded"):
                z1, z1resumed = [x["loss"] for x in rz], []
                for stop in (FREEZE, FREEZE + 3):
                    ckz = os.path.join(a.tmp, f"ckpt-z1-{stop}-np{ranks}")
                    p1 = train(exe, ranks, data, stop, exe + ".p1.jsonl", "--checkpoint-dir",
                               ckz, "--checkpoint-every", str(stop))
                    p2 = train(exe, ranks, data, STEPS - stop, exe + ".p2.jsonl",
                               "--checkpoint-dir", ckz, "--checkpoint-every", str(stop),
                               "--resume")
                    z1resumed.append([x["loss"] for x in p1 + p2] == z1)
        # The first compressed update against float64: float32 in any
        # order rounds near-zero momenta to either sign, and each flip moves
        # its element by 2 * scale * lr, so Loom's distance and PyTorch's
        # float32 one are of the same order but not within 3x of each other
        # on every CPU (4 ranks: 9.8e-6 vs 2.7e-6 on one machine, under 3x on
        # another): the bound is 4x PyTorch's, at least 2e-5.
        ok = (warm <= 1e-7 and first <= max(2e-5, 4 * first32) and err <= 1e-2 and
              scale <= max(1e-5, 3 * scale32) and 1 - signs <= max(1e-3, 3 * (1 - signs32)) and
              after * 16 <= before and resumed == lo and zero <= 1e-6 and all(z1resumed) and
              zbytes[1, "replicated"] == after)
        print(f"{ranks} ranks: before the freeze {warm:.1e} from adamw (bound 1e-7); after the "
              f"first compressed update {first:.1e} from the float64 1-bit Adam reference "
              f"(float32 references up to {first32:.1e}); momentum after two: scales {scale:.1e} "
              f"({scale32:.1e}), signs {100 * signs:.2f}% equal ({100 * signs32:.2f}%); every step "
              f"{err:.1e} (bound 1e-2); "
              f"bytes a step "
              f"{before} -> {after} ({before / after:.1f}x, bound 16x); resume across the "
              f"freeze {'bitwise equal' if resumed == lo else 'DIFFERS'}; ZeRO 1 and 2 "
              f"{zero:.1e} from ZeRO 0 (bound 1e-6), bytes a step after the freeze "
              f"{zbytes[1, 'sharded']} sharded, {zbytes[1, 'replicated']} replicated, stage 1 "
              f"resumed at and after the freeze "
              f"{'bitwise equal' if all(z1resumed) else 'DIFFERS'}; loss {lo[0]:.4f} -> "
              f"{lo[-1]:.4f} {'ok' if ok else 'FAIL'}")
        if not ok:
            bad.append(ranks)
        if ranks == 2:
            bad += variance_refresh(a, cfg, data, tokens, params, ranks, before, after)
    if a.converge:
        # 300 steps of byte-level GPL-3 text, 2 ranks, freeze after 100 (a
        # third of the run), SEEDS seeds of the initial weights, each seed
        # run with both optimizers: per seed, the final loss (the mean of
        # the last 20 steps) of 1-bit Adam relative to AdamW's. Sign
        # compression makes a trajectory chaotic: a change to the last bit
        # of Adam's rounding moves single seeds by a few percent either way
        # (AdamW's own final loss varies by 9% across seeds), so a single
        # run, or a two-sided bound on a mean of 3, fails on noise (issue
        # 44: -0.4% became -1.64% when Adam stopped fusing multiply-adds).
        # The bound is one-sided, on the paired mean over seeds: 1-bit
        # Adam may not end more than 1% worse than AdamW. Measured
        # 2026-11-29 over 10 seeds: per-seed differences -0.3% to +0.8%
        # (one FMA-free rounding) and -0.7% to +1.8% (the fused one), means
        # +0.10% and +0.29%, standard error of a 6-seed mean about 0.3%: the
        # bound is 3 standard errors away. The lower bound, -3%, only
        # catches a loss that is not a loss. Freezing earlier ends worse:
        # at 30 +2.8%, at 60 +4.3% (one seed).
        text = "/usr/share/common-licenses/GPL-3"
        raw = open(text, "rb").read()
        gpl = os.path.join(a.tmp, "gpl.bin")
        with open(gpl, "wb") as f:
            f.write(b"".join(c.to_bytes(2, "little") for c in raw))
        keys = "layers=2,d_model=64,heads=4,vocab=256,seq=64,batch=8"
        adam = compile_(a, "gpl-adamw", 2, "--optimizer=adamw", keys=keys)
        onebit = compile_(a, "gpl-onebit", 2, "--optimizer=onebit-adam", "--freeze-step=100",
                          keys=keys)
        # The bucketed form (one scale per 16M elements; the fast one on
        # GPUs, bench/RESULTS.md) on the same seeds.
        bucketed = compile_(a, "gpl-onebit-b", 2, "--optimizer=onebit-adam",
                            "--freeze-step=100", "--onebit-bucket-size=16777216", keys=keys)
        final = lambda exe, seed: sum(x["loss"] for x in train(
            exe, 2, gpl, 300, f"{exe}.s{seed}.jsonl", "--seed", str(seed))[-20:]) / 20
        fa = [final(adam, s) for s in range(SEEDS)]

        def paired(exe):
            d = [(final(exe, s) - x) / x for s, x in enumerate(fa)]
            mean = sum(d) / SEEDS
            se = math.sqrt(sum((x - mean) ** 2 for x in d) / (SEEDS - 1) / SEEDS)
            return d, mean, se
        do, mo, so = paired(onebit)
        db, mb, sb = paired(bucketed)
        # The bucketed form's single scale spans every tensor of this small
        # model (embeddings and layer norms alike): it is coarser, and its
        # seeds spread wider (10 seeds 2026-11-29: mean +0.77%, -1.8% to
        # +5.6%, standard error of a 6-seed mean about 0.9%), so its bound
        # is 3%.
        ok = -0.03 <= mo <= 0.01 and -0.03 <= mb <= 0.03
        pct = lambda d: ", ".join(f"{100 * x:+.2f}%" for x in d)
        print(f"300 steps of GPL-3, 2 ranks, freeze 100, {SEEDS} seeds: final loss (last 20 "
              f"steps) against adamw's, paired by seed: 1-bit adam mean {100 * mo:+.2f}% "
              f"(standard error {100 * so:.2f}%; {pct(do)}), bucketed mean {100 * mb:+.2f}% "
              f"(standard error {100 * sb:.2f}%; {pct(db)}); bounds +1% and +3% (-3%) "
              f"{'ok' if ok else 'FAIL'}")
        if not ok:
            bad.append("converge")
    if bad:
        sys.exit(f"1-bit Adam checks failed: {bad}")


if __name__ == "__main__":
    main()
