#!/usr/bin/env python3
"""Offload composed with data parallelism (issue 20, first part): with
`--topology gpu=R --zero-stage=0|3 --optimizer-offload=cpu` each rank keeps
the master weights and Adam state of what it updates in pinned host memory
(stage 0: every parameter; stage 3: its shard of each bucket), copies its
gradient (the averaged one, or its reduce-scattered shard) to the host as
soon as the collective is done, updates on the CPU and refreshes the
device working copy. On CPU ranks the step must give exactly the losses of
the same data-parallel step without offload, fp32 and bf16, on 2 and 4
ranks; a resumed run continues exactly; what is not supported yet is
refused with one line."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import noisy_pattern, parse_args, train  # noqa: E402

SPEC = "gpt:layers=2,d_model=16,heads=2,vocab=32,seq=8,batch=8"
STEPS = 8


def main():
    a = parse_args()
    loomc = os.path.join(a.bin, "loomc")
    data = os.path.join(a.tmp, "tokens.bin")
    noisy_pattern(data, 32, 6000)

    def build(name, *flags):
        exe = os.path.join(a.tmp, name)
        subprocess.run([loomc, "--model", SPEC, "--bucket-size=1000", "-o", exe, *flags],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return exe

    bad = 0
    for ranks in (2, 4):
        for stage in (0, 3):
            for precision in ("fp32", "bf16"):
                common = [f"--topology=gpu={ranks}", f"--zero-stage={stage}",
                          f"--precision={precision}"]
                tag = f"r{ranks}z{stage}{precision}"
                ref = build(tag, *common)
                off = build(tag + "-off", *common, "--optimizer-offload=cpu")
                want = [r["loss"] for r in train(ref, ranks, data, STEPS, ref + ".log")]
                got = [r["loss"] for r in train(off, ranks, data, STEPS, off + ".log")]
                same = got == want and len(got) == STEPS and got[-1] < got[0]
                bad += not same
                print(f"{ranks} ranks, ZeRO-{stage}, {precision}: offload cpu vs on-device "
                      f"optimizer: {'identical' if same else 'DIFFERENT'} losses")
                if not same:
                    print(f"  {want}\n  {got}")

    # Resume: 3 steps, a checkpoint of every rank's offloaded shard and
    # state, 5 more: the 8 straight steps' losses.
    off = os.path.join(a.tmp, "r2z3fp32-off")
    ck = os.path.join(a.tmp, "ck")
    straight = [r["loss"] for r in train(off, 2, data, STEPS, off + ".log")]
    first = [r["loss"] for r in train(off, 2, data, 3, off + ".a.log", "--checkpoint-dir", ck,
                                      "--checkpoint-every", "3")]
    second = [r["loss"] for r in train(off, 2, data, STEPS - 3, off + ".b.log", "--checkpoint-dir",
                                       ck, "--resume")]
    same = first + second == straight
    bad += not same
    print(f"2 ranks, ZeRO-3, offload cpu, resumed after 3 steps: "
          f"{'identical' if same else 'DIFFERENT'} losses")

    for flags in (["--zero-stage=2"], ["--zero-stage=3", "--optimizer-offload=interleaved"]):
        args = [loomc, "--model", SPEC, "--topology=gpu=2", "-o", os.path.join(a.tmp, "x"), *flags]
        if "--optimizer-offload=interleaved" not in flags:
            args.append("--optimizer-offload=cpu")
        p = subprocess.run(args, capture_output=True, text=True)
        print(f"refused ({p.returncode}): {p.stderr.strip()}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
