#!/usr/bin/env python3
"""How long one expert exchange takes on this host, outside any model
(issue 52): all_to_all_single of the EP=2 row's dispatch buffer (8 x 2560
x 2048 bf16, 84 MB a rank, half to the other GPU) timed by CUDA events over
20 calls after 5 warm-ups. Rank 0 also times a plain device-to-device copy
of the half that crosses (42 MB) to the other GPU (the copy engine over
NVLink). Launched torchrun-style on 2 GPUs; rank 0 prints one JSON line.
"""
import json
import os

import torch
import torch.distributed as dist


def timed(fn, n=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n


rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
buf = torch.randn(8 * 2560, 2048, device="cuda", dtype=torch.bfloat16)
out = torch.empty_like(buf)
ms = timed(lambda: dist.all_to_all_single(out, buf))
half = buf[: buf.shape[0] // 2]
copy_ms = None
if rank == 0:
    dst = torch.empty_like(half, device="cuda:1")
    copy_ms = timed(lambda: dst.copy_(half, non_blocking=True))
dist.barrier()
if rank == 0:
    mb = buf.numel() * 2 / 1e6
    print(json.dumps({"all_to_all_single_ms": ms, "buffer_mb": mb,
                      "crossing_gb_per_s": mb / 2 / 1e3 / (ms / 1e3),
                      "peer_copy_ms": copy_ms, "peer_copy_gb_per_s": mb / 2 / 1e3 / (copy_ms / 1e3)}))
dist.destroy_process_group()
