#!/usr/bin/env python3
"""Offload composed with data parallelism (issue 20): with
`--topology gpu=R --zero-stage=S --optimizer-offload=MODE` each rank keeps
the master weights and Adam state of what it updates in pinned host memory
(stage 0: every parameter; stages 1-3: its shard of each bucket), moves the
gradient (the averaged one, or its slice of the reduced bucket) to the host
as soon as the collective is done, updates on the CPU or streams the state
to the GPU, and refreshes the device working copy (at stages 1 and 2 the
whole parameters are then all-gathered from the refreshed shards).

On CPU ranks every mode must give exactly the losses of the same
data-parallel step without offload, fp32 and bf16, ZeRO 0-3, on 2 and 4
ranks:
  * cpu and static:0.5 as loomc plans them, and cpu with the CPU's updates
    on the step's host thread (--host-thread=on);
  * interleaved as the cost model plans it (a slow-CPU host with fast PCIe);
  * a hand-written plan with every placement in one step (the subgroups of
    the ranks' shards gpu, stream, cpu in turn, applied by
    loom-offload-optimizer mode=subgroups), run through loom-opt so each
    pass of the composed pipeline is the one loomc runs.
ZeRO-3 with ZeRO++ (qwZ, hpZ, qgZ) and 1-bit Adam at ZeRO 0-2, on 2 and 4
ranks: loomc's cpu plan and a hand-written gpu/stream/cpu plan give the
losses of the same run without offload. Resumed runs continue exactly; what is not supported is
refused with one line."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import noisy_pattern, parse_args, train  # noqa: E402

SPEC = "gpt:layers=2,d_model=16,heads=2,vocab=32,seq=8,batch=8"
STEPS = 8
HW = os.path.join(os.path.dirname(__file__), "Inputs", "slow-cpu.json")


def run(args, stdin=None):
    p = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"failed ({p.returncode}): {' '.join(args)}\n{p.stderr}")
    return p.stdout


def main():
    a = parse_args()
    loomc = os.path.join(a.bin, "loomc")
    loomopt = os.path.join(a.bin, "loom-opt")
    data = os.path.join(a.tmp, "tokens.bin")
    noisy_pattern(data, 32, 6000)

    def build(name, *flags):
        exe = os.path.join(a.tmp, name)
        run([loomc, "--model", SPEC, "--bucket-size=1000", "-o", exe, *flags])
        return exe

    def placed_in_turn(name, grouped):
        """A step with loom.subgroups: placed gpu, stream, cpu in turn, the
        offload applied (loom-offload-optimizer mode=subgroups), built."""
        places = iter(["gpu", "stream", "cpu"] * 100)
        planned, n = re.subn(r"(loom\.subgroup @sg\d+ \[[^\]]*\] numel \d+)",
                             lambda m: f'{m.group(1)} update {next(places)}', grouped)
        assert n >= 3, "fewer than three subgroups: not every placement is tested"
        mlir = os.path.join(a.tmp, name + ".mlir")
        with open(mlir, "w") as f:
            f.write(run([loomopt, "--loom-offload-optimizer=mode=subgroups"], planned))
        exe = os.path.join(a.tmp, name)
        run([loomc, mlir, "-o", exe])
        return exe

    def resumes_exactly(tag, ranks, what=""):
        """3 steps, a checkpoint of every rank's offloaded shards, state and
        working copies, 5 more: the 8 straight steps' losses. Prints the
        line and returns whether they are equal."""
        exe = os.path.join(a.tmp, tag)
        ck = os.path.join(a.tmp, "ck-" + tag)
        straight = [r["loss"] for r in train(exe, ranks, data, STEPS, exe + ".s.log")]
        first = [r["loss"] for r in train(exe, ranks, data, 3, exe + ".a.log", "--checkpoint-dir",
                                          ck, "--checkpoint-every", "3")]
        second = [r["loss"] for r in train(exe, ranks, data, STEPS - 3, exe + ".b.log",
                                           "--checkpoint-dir", ck, "--resume")]
        same = first + second == straight
        print(f"{tag}, resumed after 3 steps{what}: {'identical' if same else 'DIFFERENT'} "
              f"losses")
        return same

    def hand_planned(name, ranks, stage, precision):
        """The composed pipeline by hand: the step before distribution,
        loom-data-parallel (master shards at stages 1 and 2), subgroups of
        the shards placed gpu, stream, cpu in turn, the offload applied."""
        step = run([loomc, "--model", SPEC, f"--topology=gpu={ranks}",
                    f"--precision={precision}", "--compile-to=optimizer"])
        masters = 1 if stage in (1, 2) else 0
        grouped = run([loomopt, f"--loom-data-parallel=zero-stage={stage} bucket-size=1000 "
                       f"master-shards={masters}",
                       # (ZeRO-3's buckets are whole blocks: smaller subgroups
                       # so that there are three or more.)
                       f"--loom-optimizer-subgroups=sub-group-size="
                       f"{(600 if stage == 3 else 2000) // ranks}"], step)
        return placed_in_turn(name, grouped)

    bad = 0
    for ranks in (2, 4):
        for stage in (0, 1, 2, 3):
            for precision in ("fp32", "bf16"):
                common = [f"--topology=gpu={ranks}", f"--zero-stage={stage}",
                          f"--precision={precision}"]
                tag = f"r{ranks}z{stage}{precision}"
                ref = build(tag, *common)
                want = [r["loss"] for r in train(ref, ranks, data, STEPS, ref + ".log")]
                exes = {
                    "cpu": build(tag + "-cpu", *common, "--optimizer-offload=cpu"),
                    "static:0.5": build(tag + "-static", *common, "--optimizer-offload=static:0.5"),
                    "interleaved": build(tag + "-il", *common, "--optimizer-offload=interleaved",
                                         f"--hardware={HW}", "--sub-group-size=1000"),
                    "gpu/stream/cpu": hand_planned(tag + "-hand", ranks, stage, precision),
                    # The CPU's updates on each rank's host thread, queued
                    # inside the backward once the gradient (shard) lands.
                    "cpu (host thread)": build(tag + "-cpuh", *common, "--optimizer-offload=cpu",
                                               "--host-thread=on"),
                }
                for mode, exe in exes.items():
                    got = [r["loss"] for r in train(exe, ranks, data, STEPS, exe + ".log")]
                    same = got == want and len(got) == STEPS and got[-1] < got[0]
                    bad += not same
                    print(f"{ranks} ranks, ZeRO-{stage}, {precision}: offload {mode} vs on-device "
                          f"optimizer: {'identical' if same else 'DIFFERENT'} losses")
                    if not same:
                        print(f"  {want}\n  {got}")

    # Resume across a checkpoint of the offloaded state.
    for tag in ("r2z1fp32-cpu", "r2z2bf16-hand", "r4z3fp32-cpu"):
        bad += not resumes_exactly(tag, int(tag[1]))

    # ZeRO++ (issue 44): qwZ, hpZ and qgZ rewrite the collectives, the
    # offload then moves each rank's update of its shard; the losses are
    # those of the same ZeRO++ run without offload (so the codecs are still
    # there: dropping them changes the losses from the second step).
    def distributed_hand(name, ranks, common):
        """loomc's distributed step (ZeRO++'s codecs, 1-bit Adam's frozen
        step); its updates' subgroups placed gpu, stream, cpu in turn; the
        offload applied."""
        stage = next((f[-1] for f in common if f.startswith("--zero-stage=")), "0")
        if stage in "12":
            # ZeRO 1-2 offload master shards, which loomc makes only when
            # it offloads: the distribution by hand.
            step = run([loomc, "--model", SPEC, *common, "--compile-to=optimizer"])
            step = run([loomopt, "--loom-onebit-adam=freeze-step=4",
                        f"--loom-data-parallel=zero-stage={stage} bucket-size=1000 "
                        "master-shards=1"], step)
        else:
            step = run([loomc, "--model", SPEC, "--bucket-size=1000", *common,
                        "--compile-to=distribute"])
        grouped = run([loomopt, f"--loom-optimizer-subgroups=sub-group-size={600 // ranks}"],
                      step)
        return placed_in_turn(name, grouped)

    for ranks, topology, zeropp in ((2, "gpu=2", "qwz,qgz"), (4, "node=2,gpu=2", "qwz,hpz,qgz")):
        for precision in ("fp32", "bf16"):
            common = [f"--topology={topology}", "--zero-stage=3", f"--zeropp={zeropp}",
                      f"--precision={precision}"] + (["--hierarchy=auto"] if ranks == 4 else [])
            tag = f"r{ranks}zpp{precision}"
            ref = build(tag, *common)
            want = [r["loss"] for r in train(ref, ranks, data, STEPS, ref + ".log")]
            plain = build(tag + "-plain", *common[:2], f"--precision={precision}")
            flat = [r["loss"] for r in train(plain, ranks, data, STEPS, plain + ".log")]
            exes = {"cpu": build(tag + "-cpu", *common, "--optimizer-offload=cpu"),
                    "gpu/stream/cpu": distributed_hand(tag + "-hand", ranks, common)}
            for mode, exe in exes.items():
                got = [r["loss"] for r in train(exe, ranks, data, STEPS, exe + ".log")]
                same = got == want and want != flat and got[-1] < got[0]
                bad += not same
                print(f"{ranks} ranks, ZeRO-3 + {zeropp}, {precision}: offload {mode} vs "
                      f"on-device optimizer: {'identical' if same else 'DIFFERENT'} losses")
                if not same:
                    print(f"  {want}\n  {got}\n  without ZeRO++ {flat}")
    bad += not resumes_exactly("r4zppfp32-cpu", 4)

    # 1-bit Adam (issue 44). ZeRO 0: the warm-up step offloaded as AdamW's,
    # the frozen step's momentum up from host memory for the worker's
    # compression, the exchanged momentum down, the frozen update on the
    # CPU. ZeRO 1-2 (sharded frozen variance): the master shards in host
    # memory, each rank's frozen update of its shard placed as the warm-up's
    # (the whole momentum stays on the device), @enter_frozen's momentum
    # shards up before their gather. Against the same 1-bit Adam run
    # without offload, across the freeze (step 4 of 8), and a resume across
    # it.
    for ranks, stage, precision in ((2, 0, "fp32"), (2, 0, "bf16"), (4, 0, "fp32"),
                                    (4, 0, "bf16"), (2, 1, "fp32"), (2, 2, "bf16"),
                                    (4, 1, "bf16"), (4, 2, "fp32")):
        common = [f"--topology=gpu={ranks}", f"--zero-stage={stage}",
                  "--optimizer=onebit-adam", "--freeze-step=4", f"--precision={precision}"]
        tag = f"r{ranks}ob{stage}{precision}"
        ref = build(tag, *common)
        want = [r["loss"] for r in train(ref, ranks, data, STEPS, ref + ".log")]
        exes = {"cpu": build(tag + "-cpu", *common, "--optimizer-offload=cpu"),
                "gpu/stream/cpu": distributed_hand(tag + "-hand", ranks, common)}
        for mode, exe in exes.items():
            got = [r["loss"] for r in train(exe, ranks, data, STEPS, exe + ".log")]
            same = got == want and got[-1] < got[0]
            bad += not same
            print(f"{ranks} ranks, 1-bit Adam, ZeRO-{stage}, {precision}: offload {mode} vs "
                  f"on-device "
                  f"optimizer: {'identical' if same else 'DIFFERENT'} losses")
            if not same:
                print(f"  {want}\n  {got}")
    bad += not resumes_exactly("r2ob0fp32-cpu", 2, " (across the freeze)")
    bad += not resumes_exactly("r2ob2bf16-hand", 2, " (across the freeze)")

    # Streaming DiLoCo (issue 44): each replica offloads its inner AdamW;
    # the global copy and outer momentum of an offloaded parameter live in
    # host memory with its master weights, the pseudo-gradient, outer SGD
    # and merge run on the host and the exchange on the device; the merged
    # weights refresh the working copy. Against the same DiLoCo run without
    # offload: fp32 and fp4 exchanges, with and without overlap, replicas of
    # one rank and of two (ZeRO 0 inside), across outer steps 2-3 times
    # per fragment; and a resume between two outer steps.
    for ranks, topology, diloco, precision in (
            (2, "replica=2", "inner-steps=2,fragments=2,quant=fp32", "fp32"),
            (2, "replica=2", "inner-steps=4,fragments=2,overlap=1,quant=fp4", "bf16"),
            (4, "replica=2,gpu=2", "inner-steps=2,quant=bf16", "bf16")):
        common = [f"--topology={topology}", f"--diloco={diloco}", f"--precision={precision}"]
        tag = f"r{ranks}dl{precision}"
        ref = build(tag, *common)
        want = [r["loss"] for r in train(ref, ranks, data, STEPS, ref + ".log")]
        exes = {"cpu": build(tag + "-cpu", *common, "--optimizer-offload=cpu"),
                "static:0.5": build(tag + "-static", *common, "--optimizer-offload=static:0.5"),
                "interleaved": build(tag + "-il", *common, "--optimizer-offload=interleaved",
                                     f"--hardware={HW}", "--sub-group-size=1000")}
        for mode, exe in exes.items():
            got = [r["loss"] for r in train(exe, ranks, data, STEPS, exe + ".log")]
            same = got == want and got[-1] < got[0]
            bad += not same
            print(f"{ranks} ranks, DiLoCo {topology} {diloco}, {precision}: offload {mode} vs "
                  f"on-device optimizer: {'identical' if same else 'DIFFERENT'} losses")
            if not same:
                print(f"  {want}\n  {got}")
    bad += not resumes_exactly("r2dlbf16-cpu", 2, " (between outer steps)")

    for flags in (["--topology=gpu=2", "--zero-stage=1", "--optimizer=onebit-adam",
                   "--freeze-step=2", "--onebit-variance=replicated"],
                  ["--topology=replica=2,gpu=2", "--zero-stage=1", "--diloco=inner-steps=2"]):
        args = [loomc, "--model", SPEC, "--optimizer-offload=cpu",
                "-o", os.path.join(a.tmp, "x"), *flags]
        p = subprocess.run(args, capture_output=True, text=True)
        print(f"refused ({p.returncode}): {p.stderr.strip()}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
