"""Shared pieces of the multi-rank tests (standard library only): Open MPI's
launcher as the tests start it, running a training binary on ranks, a token
file, a free port, and finding a job's rank processes."""
import argparse
import json
import os
import socket
import random
import subprocess
import sys

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def parse_args(*switches):
    """--bin and --tmp (made), and boolean --SWITCHES."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="folder with loomc and loom-run")
    ap.add_argument("--tmp", required=True)
    for s in switches:
        ap.add_argument(f"--{s}", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    return a


def run(cmd):
    """Runs `cmd` under ENV; exits with its output when it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


def train(exe, ranks, data, steps, log, *extra):
    """`steps` steps of a training binary on `ranks` MPI ranks; its JSON log."""
    if os.path.exists(log):
        os.remove(log)
    run(MPIRUN + ["-np", str(ranks), exe, "--data", data, "--steps", str(steps),
                  "--log-json", log, *extra])
    return [json.loads(line) for line in open(log)]


def compiler(loomc, folder):
    """compile(name, model, *flags): a CPU binary `name` in `folder` of a
    generator spec or an ONNX file."""
    def compile_(name, model, *flags):
        exe = os.path.join(folder, name)
        source = [model] if model.endswith(".onnx") else ["--model", model]
        run([loomc, *source, "--target=cpu", "-o", exe, *flags])
        return exe
    return compile_


class LossCheck:
    """compare(label, got, ref[, bound]) prints one line: the largest
    relative difference of the losses `got` from `ref`, ok when there are
    `steps` of them and it is within the bound; `worst` is the largest seen
    at the default bound."""

    def __init__(self, steps, bound):
        self.steps, self.bound, self.worst = steps, bound, 0.0

    def compare(self, label, got, ref, bound=None):
        bound = self.bound if bound is None else bound
        err = max(abs(x - y) / abs(y) for x, y in zip(got, ref))
        if bound == self.bound:
            self.worst = max(self.worst, err)
        ok = len(got) == self.steps and len(ref) == self.steps and err <= bound
        print(f"{label}: max relative difference {err:.2e} over {len(got)} steps: "
              f"{'ok' if ok else 'FAILED'}")


def losses(log):
    """The losses of a JSON log's steps."""
    return [s["loss"] for s in log if "loss" in s]


def free_port():
    """A TCP port on the loopback that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tcp_rank_env(rank, world, port, key, timeout):
    """The environment of one rank started torchrun-style on the loopback,
    over the runtime's elastic TCP transport (not under mpirun): its rank,
    the rendezvous, the job key the rendezvous checks, the collective
    timeout."""
    env = dict(ENV, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), LOOMRT_COMM_TIMEOUT=str(timeout), LOOMRT_JOB_KEY=key)
    for v in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"):
        env.pop(v, None)
    return env


def noisy_pattern(path, vocab, n):
    """A token file (uint16): a 29-token phrase repeated, 10% of tokens
    replaced at random (seeded), so a small model learns it but not
    exactly. Returns the tokens."""
    rnd = random.Random(5)
    phrase = [rnd.randrange(vocab) for _ in range(29)]
    toks = [phrase[i % 29] if rnd.random() > 0.1 else rnd.randrange(vocab) for i in range(n)]
    with open(path, "wb") as f:
        f.write(b"".join(t.to_bytes(2, "little") for t in toks))
    return toks


def rank_pids(binary, rank=None):
    """PIDs of the processes running `binary` (as MPI rank `rank`, if given)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode()
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if rank is not None else []
        except OSError:
            continue
        if cmd == binary and (rank is None or f"OMPI_COMM_WORLD_RANK={rank}".encode() in env):
            out.append(int(pid))
    return out
