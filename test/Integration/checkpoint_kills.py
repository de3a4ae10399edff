#!/usr/bin/env python3
"""Kill-and-resume of a 2-rank ZeRO-1 run (issue 14's acceptance): a job that
checkpoints every step is SIGKILLed at a random moment (a random rank, mostly
while it writes), then resumed; K times. After every kill the committed
checkpoint must be one step for both ranks (the manifest's step, both parts
present, each part's own metadata saying that step), every resume must start
there, and at the end the resumed chain's losses must equal an uninterrupted
run's bit for bit (ranks at different steps would train on other data).

    checkpoint_kills.py --bin BUILD/bin --tmp DIR [--kills K] [--seed S]

Standard library only; Open MPI's mpirun.
"""
import argparse
import json
import os
import random
import signal
import struct
import subprocess
import sys
import time

from mpitest import ENV, MPIRUN, rank_pids

GPT = "gpt:layers=2,d_model=64,heads=2,vocab=128,seq=32,batch=4"


def header_meta(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


def committed(ck):
    """The manifest's step, after checking that both parts exist and say it."""
    m = json.load(open(os.path.join(ck, "checkpoint.json")))
    step = m["step"]
    for r, part in enumerate(m["parts"]):
        meta = header_meta(os.path.join(ck, part))
        if meta.get("step") != str(step) or meta.get("rank") != str(r):
            sys.exit(f"part {part} says step {meta.get('step')} rank {meta.get('rank')}, "
                     f"the manifest says step {step}")
    return step


def losses(log):
    return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(log) if l.strip()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    os.makedirs(a.tmp, exist_ok=True)
    data = os.path.join(a.tmp, "tokens.bin")
    with open(data, "wb") as f:
        f.write(b"".join(rnd.randrange(128).to_bytes(2, "little") for _ in range(40000)))
    binary = os.path.join(a.tmp, "z1-np2")
    subprocess.run([os.path.join(a.bin, "loomc"), "--model", GPT, "--topology=rank=2",
                    "--zero-stage=1", "-o", binary], check=True)
    ck = os.path.join(a.tmp, "ck")
    log = os.path.join(a.tmp, "chain.json")
    for path in (log,):
        if os.path.exists(path):
            os.remove(path)
    subprocess.run(["rm", "-rf", ck], check=True)

    chain = {}
    steps_seen = []
    for k in range(a.kills):
        resume = os.path.exists(os.path.join(ck, "checkpoint.json"))
        before = committed(ck) if resume else 0
        part_log = os.path.join(a.tmp, f"run{k}.json")
        if os.path.exists(part_log):
            os.remove(part_log)
        cmd = MPIRUN + ["-np", "2", binary, "--data", data, "--steps", "100000",
                        "--checkpoint-dir", ck, "--checkpoint-every", "1", "--log-json", part_log]
        p = subprocess.Popen(cmd + (["--resume"] if resume else []), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=ENV)
        start = time.time()
        while not (os.path.exists(part_log) and len(open(part_log).readlines()) >= 2):
            if time.time() - start > 120 or p.poll() is not None:
                p.kill()
                sys.exit(f"kill {k}: the job never got going:\n{p.stdout.read()}")
            time.sleep(0.02)
        time.sleep(rnd.uniform(0.0, 0.4))
        victims = rank_pids(binary)
        if not victims:
            sys.exit(f"kill {k}: no rank to kill")
        os.kill(rnd.choice(victims), signal.SIGKILL)
        try:
            p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            sys.exit(f"kill {k}: the job did not end after a rank was killed")
        for pid in rank_pids(binary):
            os.kill(pid, signal.SIGKILL)
        got = losses(part_log)
        first = min(got)
        if first != before + 1:
            sys.exit(f"kill {k}: resumed at step {first - 1}, the committed step was {before}")
        after = committed(ck)
        if after < before:
            sys.exit(f"kill {k}: the committed step went back from {before} to {after}")
        # Keep the losses of the steps that the next run will not redo.
        for s, v in got.items():
            if s <= after:
                chain[s] = v
        steps_seen.append(after)
    # One last resume, then the whole chain against an uninterrupted run.
    last = committed(ck)
    tail_log = os.path.join(a.tmp, "tail.json")
    if os.path.exists(tail_log):
        os.remove(tail_log)
    subprocess.run(MPIRUN + ["-np", "2", binary, "--data", data, "--steps", "3",
                             "--checkpoint-dir", ck, "--resume", "--log-json", tail_log],
                   check=True, stdout=subprocess.DEVNULL, env=ENV)
    chain.update(losses(tail_log))
    straight_log = os.path.join(a.tmp, "straight.json")
    if os.path.exists(straight_log):
        os.remove(straight_log)
    subprocess.run(MPIRUN + ["-np", "2", binary, "--data", data, "--steps", str(last + 3),
                             "--log-json", straight_log],
                   check=True, stdout=subprocess.DEVNULL, env=ENV)
    straight = losses(straight_log)
    same = all(chain.get(s) == straight[s] for s in straight)
    print(f"{a.kills} SIGKILLs of a 2-rank ZeRO-1 run checkpointing every step: committed "
          f"steps {steps_seen[:8]}{'...' if len(steps_seen) > 8 else ''}, both ranks' parts "
          f"always at the manifest's step")
    print(f"resumed chain of {last + 3} steps vs uninterrupted: "
          f"{'identical' if same else 'DIFFERENT'} losses")
    if not same:
        bad = [s for s in straight if chain.get(s) != straight[s]][:5]
        sys.exit(f"differing steps: {bad}")


if __name__ == "__main__":
    main()
