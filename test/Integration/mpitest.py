"""Shared pieces of the multi-rank tests (standard library only): Open MPI's
launcher as the tests start it, and finding a job's rank processes."""
import os

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


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
