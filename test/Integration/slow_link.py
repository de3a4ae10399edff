#!/usr/bin/env python3
"""LOOMRT_SLOW_LINK (issue 19's emulated inter-node link) on 4 CPU ranks
(Open MPI) as --topology=node=2,gpu=2, flat ZeRO-3: with
LOOMRT_SLOW_LINK=2:0.001 every collective over the world spans both
"nodes", so each holds until its bytes would have crossed 1 MB/s; a step
then lasts at least the bytes this rank sends a step / 1 MB/s (a lower
bound the runtime's hold guarantees; the real transfers are far faster).
Without the variable the fastest of the same steps is checked to be well
under that bound, so the check shows the shaping, not a slow machine (the
fastest, not the slowest: a busy CI machine stretches some unshaped steps,
as it did to 148 ms of a 251 ms bound once; shaping holds every step). A malformed or
out-of-range value (a rate that would hold a collective past the watchdog,
or one that rounds to nothing) ends the run before training, with one line
that names it.
    slow_link.py --bin BIN --tmp TMP
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import ENV, MPIRUN, noisy_pattern, parse_args, run  # noqa: E402

RATE = 0.001e9  # bytes a second: slow enough that a loaded machine stays far under it


def steps(exe, data, log, env):
    if os.path.exists(log):
        os.remove(log)
    p = run(MPIRUN + ["-np", "4"] + [x for e in env for x in ("-x", e)] +
            [exe, "--data", data, "--steps", "5", "--log-json", log])
    return p, [json.loads(line) for line in open(log)]


def main():
    a = parse_args()
    data = os.path.join(a.tmp, "tokens.bin")
    noisy_pattern(data, 61, 20000)
    exe = os.path.join(a.tmp, "flat")
    run([os.path.join(a.bin, "loomc"), "--model",
         "gpt:layers=2,d_model=32,heads=2,vocab=61,seq=16,batch=8", "--topology=node=2,gpu=2",
         "--zero-stage=3", "--hierarchy=flat", "-o", exe])
    _, plain = steps(exe, data, exe + ".plain.jsonl", [])
    p, slow = steps(exe, data, exe + ".slow.jsonl", [f"LOOMRT_SLOW_LINK=2:{RATE / 1e9}"])
    bound = slow[-1]["comm_bytes"] / RATE * 1e3  # ms
    fastest_slow = min(r["step_ms"] for r in slow[1:])
    fastest_plain = min(r["step_ms"] for r in plain[1:])
    said = "emulated 0.001 GB/s link" in p.stdout + p.stderr
    ok = said and fastest_slow >= bound and fastest_plain < bound / 2
    print(f"shaped steps at least {fastest_slow:.1f} ms, bound {bound:.1f} ms "
          f"({slow[-1]['comm_bytes']} B at 1 MB/s); unshaped from {fastest_plain:.1f} ms; "
          f"announced {said} {'ok' if ok else 'FAIL'}")
    bad = True
    for value in ("two", "2:1e-12", "2:1e-300", "0:5"):
        p = subprocess.run(MPIRUN + ["-np", "4", "-x", f"LOOMRT_SLOW_LINK={value}", exe, "--data",
                                     data, "--steps", "3"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
        bad = bad and p.returncode != 0 and \
            f"LOOMRT_SLOW_LINK='{value}' is not RANKS:GBPS with 1 <= RANKS" in p.stdout
    print(f"malformed and out-of-range values refused {'ok' if bad else 'FAIL'}")
    if not (ok and bad):
        sys.exit("slow link checks failed")


if __name__ == "__main__":
    main()
