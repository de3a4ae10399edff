#!/usr/bin/env python3
"""Losing a rank on the elastic TCP transport (issue 41): where the program
keeps part of its state on every rank, the job ends instead of training on.

Two CPU ranks started torchrun-style (no mpirun), checkpoints every 4 steps,
rank 1 killed with SIGKILL once the log shows step KILL_AT:

  * ZeRO stage 1 and 3: rank 0 exits non-zero within the run, saying it lost
    rank 1 and cannot go on (before, the survivor trained on with half its
    parameters or optimizer state: the loss sat at ln(64) and the run exited
    0); the committed manifest names only parts that exist; two fresh ranks
    resume from it and train 4 more steps (exit 0, finite losses);
  * ZeRO stage 0 (every rank holds the whole state): rank 0 goes on alone
    and finishes (exit 0), and no checkpoint after the loss is committed
    (it would name rank 1's part, which nobody wrote): the manifest still
    names parts that exist.

    elastic_loss.py --bin BIN --tmp TMP
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import free_port, noisy_pattern, parse_args, run, tcp_rank_env  # noqa: E402

KEYS = "layers=1,d_model=32,heads=2,vocab=64,seq=16,batch=4"
STEPS, KILL_AT, EVERY = 400, 12, 4


def start(exe, data, log, ck, steps, extra=()):
    port, key = str(free_port()), os.urandom(16).hex()
    procs, errs = [], []
    for r in range(2):
        env = tcp_rank_env(r, 2, port, key, 60)
        err = open(f"{log}.rank{r}.err", "w+")
        errs.append(err)
        procs.append(subprocess.Popen(
            [exe, "--data", data, "--steps", str(steps), "--log-json", log, "--checkpoint-dir", ck,
             "--checkpoint-every", str(EVERY), *extra],
            stdout=subprocess.DEVNULL, stderr=err, env=env))
    return procs, errs


def manifest_ok(ck):
    """(committed step, every part it names exists)."""
    m = json.load(open(os.path.join(ck, "checkpoint.json")))
    return m["step"], all(os.path.exists(os.path.join(ck, p)) for p in m["parts"])


def trial(a, stage, data):
    exe = os.path.join(a.tmp, f"z{stage}")
    run([os.path.join(a.bin, "loomc"), "--model", f"gpt:{KEYS}", "--lr=3e-3",
         "--topology=rank=2", f"--zero-stage={stage}", "-o", exe])
    tmp = os.path.join(a.tmp, f"z{stage}-run")
    shutil.rmtree(tmp, ignore_errors=True)  # a stale log would trigger the kill at once
    os.makedirs(tmp)
    log, ck = os.path.join(tmp, "log.jsonl"), os.path.join(tmp, "ck")
    procs, errs = start(exe, data, log, ck, STEPS)
    killed_after, deadline = None, time.time() + 300
    while time.time() < deadline and procs[1].poll() is None:
        lines = open(log).read().splitlines() if os.path.exists(log) else []
        if len(lines) >= KILL_AT:
            procs[1].send_signal(signal.SIGKILL)
            killed_after = len(lines)
            break
        time.sleep(0.002)
    rcs = [p.wait(timeout=max(1, deadline - time.time())) for p in procs]
    errs[0].seek(0)
    text = errs[0].read()
    logged = len(open(log).read().splitlines())
    step, parts_exist = manifest_ok(ck)
    bad = []
    if stage == 0:
        ok = rcs == [0, -signal.SIGKILL] and logged == STEPS and "lost rank 1" in text
        print(f"zero-stage 0: rank 1 killed after step {killed_after}; rank 0 "
              f"{'finished alone' if ok else 'FAILED'} (exit {rcs[0]}, {logged} of {STEPS} steps "
              f"logged); committed checkpoint step {step}, its parts "
              f"{'exist' if parts_exist else 'MISSING'}")
        if not ok:
            bad.append(f"zero-stage 0: exit codes {rcs}, {logged} steps: {text[-600:]}")
        if not parts_exist or step > killed_after + EVERY:
            bad.append(f"zero-stage 0: manifest of step {step} after the loss, parts exist: "
                       f"{parts_exist}")
        return bad
    stopped = rcs[0] not in (0, None) and rcs[1] == -signal.SIGKILL
    said = "cannot go on without it" in text
    print(f"zero-stage {stage}: rank 1 killed after step {killed_after}; rank 0 "
          f"{'stopped' if stopped else 'DID NOT STOP'} (exit {rcs[0]}) after {logged} of "
          f"{STEPS} steps{' saying it cannot go on' if said else ''}; committed checkpoint step "
          f"{step}, its parts {'exist' if parts_exist else 'MISSING'}")
    if not stopped or not said or logged >= STEPS:
        bad.append(f"zero-stage {stage}: exit codes {rcs}, {logged} steps: {text[-600:]}")
    if not parts_exist:
        bad.append(f"zero-stage {stage}: the manifest names a part that does not exist")
    # Two fresh ranks resume from the committed checkpoint.
    log2 = os.path.join(tmp, "resume.jsonl")
    procs, errs = start(exe, data, log2, ck, EVERY, ["--resume"])
    rcs = [p.wait(timeout=300) for p in procs]
    losses = [json.loads(x)["loss"] for x in open(log2)] if os.path.exists(log2) else []
    resumed = rcs == [0, 0] and len(losses) == EVERY and all(abs(x) < 1e30 for x in losses)
    print(f"zero-stage {stage}: two fresh ranks resumed from step {step}: "
          f"{'exit 0, ' + str(len(losses)) + ' finite losses' if resumed else 'FAILED'}")
    if not resumed:
        errs[0].seek(0)
        bad.append(f"zero-stage {stage}: resume exit codes {rcs}: {errs[0].read()[-600:]}")
    return bad


def main():
    a = parse_args()
    data = os.path.join(a.tmp, "noisy.bin")
    noisy_pattern(data, 64, 50000)
    bad = []
    for stage in (1, 3, 0):
        bad += trial(a, stage, data)
    if bad:
        sys.exit("elastic loss checks failed:\n" + "\n".join(bad))


if __name__ == "__main__":
    main()
