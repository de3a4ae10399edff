#!/usr/bin/env python3
"""Launching a data-parallel binary where users launch (issue 46): the
same 2-rank CPU binary started by each launcher the runtime knows, over its
TCP transport (CPU ranks with MASTER_ADDR set and no mpirun):
  * torchrun-style variables set by hand (RANK, WORLD_SIZE, LOCAL_RANK);
  * Debian's real torchrun (`torchrun --nproc_per_node=2 --no_python`):
    its static rendezvous keeps its own store at MASTER_PORT
    (TORCHELASTIC_USE_AGENT_STORE=True), so rank 0 listens at the port
    after it; Debian's torch 1.13 under Python 3.11 needs --redirects and
    --tee given non-zero (its parser turns the default 0 into None);
  * Slurm's srun (SLURM_STEP_NUM_TASKS, SLURM_PROCID, SLURM_LOCALID, as
    srun sets them for a job step; MASTER_ADDR and MASTER_PORT exported);
  * MPICH's mpiexec (PMI_SIZE, PMI_RANK, MPI_LOCALRANKID).
Every run gives the same losses, bit for bit (the same transport), and
mpirun's (MPI) within 1e-6. A one-rank binary in a Slurm allocation's own
shell (SLURM_NTASKS=2, SLURM_PROCID=0, no job step) trains alone; a step
count without a rank is refused with one line."""
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import ENV, MPIRUN, free_port, run  # noqa: E402

SPEC = "gpt:layers=1,d_model=16,heads=2,vocab=64,seq=8,batch=4"
STEPS = 5
LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
               "RANK", "WORLD_SIZE", "LOCAL_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID",
               "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
               "TORCHELASTIC_USE_AGENT_STORE", "MASTER_ADDR", "MASTER_PORT")


def base_env(**extra):
    env = {k: v for k, v in ENV.items() if k not in LAUNCH_VARS}
    env.update(LOOMRT_COMM_TIMEOUT="60", LOOMRT_JOB_KEY=secrets.token_hex(16), **extra)
    return env


def free_port_pair():
    """A port p on the loopback with p + 1 free too, a moment ago: under
    torchrun's static rendezvous the agent's store listens at MASTER_PORT
    and rank 0 at the port after it (runtime/comm/tcp.cpp). With p alone
    checked, another test's socket on p + 1 failed this one in a CI run
    that ran two suites at once."""
    for _ in range(200):
        p = free_port()
        if p >= 65535:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
        finally:
            s.close()
    sys.exit("no pair of free loopback ports found")


def losses(text):
    return [float(x) for x in re.findall(r"^step +\d+/\d+ +loss ([0-9.]+)", text, re.M)]


def by_hand(exe, data, rank_env):
    """Two ranks started with the environment rank_env(r) gives."""
    port = free_port()
    common = base_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    procs = [subprocess.Popen([exe, "--data", data, "--steps", str(STEPS)],
                              env=dict(common, **rank_env(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    for p, out in zip(procs, outs):
        if p.returncode:
            sys.exit(f"rank failed ({p.returncode}):\n{out}")
    return losses(outs[0])


def main():
    bindir, tmp = sys.argv[1], sys.argv[2]
    os.makedirs(tmp, exist_ok=True)
    loomc = os.path.join(bindir, "loomc")
    data = os.path.join(tmp, "tok.bin")
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "Tools",
                                                 "Inputs", "tokens.py"), data, "4000", "64"],
                   check=True)
    dp2 = os.path.join(tmp, "dp2")
    one = os.path.join(tmp, "one")
    run([loomc, "--model", SPEC, "--topology=gpu=2", "-o", dp2])
    run([loomc, "--model", SPEC, "-o", one])

    got = {}
    got["torchrun-style variables"] = by_hand(
        dp2, data, lambda r: dict(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r)))
    got["srun (Slurm)"] = by_hand(
        dp2, data, lambda r: dict(SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2",
                                  SLURM_PROCID=str(r), SLURM_LOCALID=str(r)))
    got["mpiexec (PMI)"] = by_hand(
        dp2, data, lambda r: dict(PMI_SIZE="2", PMI_RANK=str(r), MPI_LOCALRANKID=str(r)))
    logs = tempfile.mkdtemp(dir=tmp)
    p = subprocess.run(["torchrun", "--nproc_per_node=2", f"--master_port={free_port_pair()}",
                        "--no_python", "--redirects", "1", "--tee", "1", "--log_dir", logs,
                        dp2, "--data", data, "--steps", str(STEPS)],
                       env=base_env(), capture_output=True, text=True, timeout=300)
    if p.returncode:
        sys.exit(f"torchrun failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    # (--tee prefixes each line with its role and local rank: "[default0]:")
    got["Debian's torchrun"] = losses(re.sub(r"^\[default0\]:", "", p.stdout, flags=re.M))

    ref = got["torchrun-style variables"]
    ok = len(ref) == STEPS
    print(f"{len(ref)} steps logged of {STEPS}")
    for name, ls in got.items():
        same = ls == ref
        ok &= same
        print(f"{name}: {'the same losses' if same else 'DIFFERENT losses'}"
              + ("" if same else f"\n  {ref}\n  {ls}"))
    m = subprocess.run(MPIRUN + ["-np", "2", dp2, "--data", data, "--steps", str(STEPS)],
                       env=base_env(), capture_output=True, text=True, timeout=300)
    mpi = losses(m.stdout)
    close = len(mpi) == STEPS and all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(mpi, ref))
    ok &= close
    print(f"mpirun: {'within 1e-6' if close else 'NOT within 1e-6'} of the TCP runs")

    # A one-rank binary in an allocation's own shell: no job step, one rank.
    a = subprocess.run([one, "--data", data, "--steps", "2"],
                       env=base_env(SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_JOB_ID="7"),
                       capture_output=True, text=True, timeout=120)
    alone = a.returncode == 0 and len(losses(a.stdout)) == 2
    ok &= alone
    print(f"one rank in a Slurm allocation's shell: {'trains alone' if alone else a.stderr}")
    b = subprocess.run([dp2, "--data", data, "--steps", "2"],
                       env=base_env(SLURM_STEP_NUM_TASKS="2", MASTER_ADDR="127.0.0.1",
                                    MASTER_PORT="29999"),
                       capture_output=True, text=True, timeout=120)
    print(f"refused ({b.returncode}): {b.stderr.strip()}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
