#!/usr/bin/env python3
"""All-reduce and reduce-scatter bus bandwidth through PyTorch's NCCL
backend, the baseline printed beside bench/comm_bench (same sizes, same
formulas, median of --iters after 5 warm-ups, host-timed around a
synchronisation). Start with torchrun --nproc_per_node=N."""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--max-mib", type=float, default=1024)
    a = ap.parse_args()
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    nbytes = 1 << 20
    while nbytes <= a.max_mib * (1 << 20):
        for dt in (torch.bfloat16, torch.float32):
            count = nbytes // (2 if dt == torch.bfloat16 else 4)
            x = torch.ones(count, dtype=dt, device="cuda")
            out = torch.empty(count // n, dtype=dt, device="cuda")
            for op in ("all_reduce", "reduce_scatter"):
                ts = []
                for it in range(a.iters + 5):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    if op == "all_reduce":
                        dist.all_reduce(x)
                    else:
                        dist.reduce_scatter_tensor(out, x)
                    torch.cuda.synchronize()
                    if it >= 5:
                        ts.append((time.perf_counter() - t0) * 1e3)
                ms = statistics.median(ts)
                factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
                if rank == 0:
                    print(json.dumps({"impl": "torch " + torch.__version__, "op": op,
                                      "dtype": "bf16" if dt == torch.bfloat16 else "fp32",
                                      "bytes": nbytes, "ranks": n, "ms": round(ms, 4),
                                      "busbw_gbs": round(nbytes * factor / (ms * 1e-3) / 1e9, 1)}),
                          flush=True)
        nbytes *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
