#!/usr/bin/env python3
"""Resuming on another number of ranks or another ZeRO stage (issue 46):
a checkpoint of 3 steps saved by 2 ranks at ZeRO-3 resumes on 1 rank, on
4 ranks at ZeRO-3, on 4 at ZeRO-0 and on 2 at ZeRO-1; one saved by 2 ranks
at ZeRO-0 resumes on 4 at ZeRO-3; one saved by 2 ranks at ZeRO-1 (whole
parameters, sharded moments laid out by loom.layout_of) on 1 rank and on 4
at ZeRO-2. Each continues for 3 steps with the losses of the uninterrupted
2-rank run within 1e-6 relative (the reductions change order: rounding, not
state, differs)."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import noisy_pattern, parse_args, train  # noqa: E402

SPEC = "gpt:layers=2,d_model=16,heads=2,vocab=32,seq=8,batch=8"


def main():
    a = parse_args()
    loomc = os.path.join(a.bin, "loomc")
    data = os.path.join(a.tmp, "tokens.bin")
    noisy_pattern(data, 32, 6000)

    def build(name, *flags):
        exe = os.path.join(a.tmp, name)
        subprocess.run([loomc, "--model", SPEC, "--bucket-size=1000", *flags, "-o", exe],
                       check=True, capture_output=True)
        return exe

    exes = {"r2z3": (2, build("r2z3", "--topology=gpu=2", "--zero-stage=3")),
            "r2z0": (2, build("r2z0", "--topology=gpu=2", "--zero-stage=0")),
            "r1": (1, build("r1")),
            "r4z3": (4, build("r4z3", "--topology=gpu=4", "--zero-stage=3")),
            "r4z0": (4, build("r4z0", "--topology=gpu=4", "--zero-stage=0")),
            "r2z1": (2, build("r2z1", "--topology=gpu=2", "--zero-stage=1")),
            "r4z2": (4, build("r4z2", "--topology=gpu=4", "--zero-stage=2"))}
    targets = {"r2z3": ("r1", "r4z3", "r4z0", "r2z1"), "r2z0": ("r4z3",), "r2z1": ("r1", "r4z2")}
    bad = 0
    for source in ("r2z3", "r2z0", "r2z1"):
        ranks, exe = exes[source]
        want = [r["loss"] for r in train(exe, ranks, data, 6, exe + ".log")][3:]
        ck = os.path.join(a.tmp, "ck-" + source)
        train(exe, ranks, data, 3, exe + ".a.log", "--checkpoint-dir", ck, "--checkpoint-every", "3")
        for target in targets[source]:
            n, texe = exes[target]
            mine = ck + "-to-" + target
            shutil.copytree(ck, mine)
            got = [r["loss"] for r in train(texe, n, data, 3, texe + f".{source}.log",
                                            "--checkpoint-dir", mine, "--resume")]
            close = len(got) == 3 and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(got, want))
            bad += not close
            print(f"{source} -> {target}: steps 4-6 {'within 1e-6' if close else 'NOT within 1e-6'}"
                  f" of the uninterrupted run" + ("" if close else f": {got} vs {want}"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
