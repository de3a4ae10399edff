#!/usr/bin/env python3
"""--optimizer-offload=cpu, static:0.5, interleaved and a hand-written
per-subgroup plan (gpu, stream and cpu subgroups in one step) end to end on the CPU target: master weights and
Adam state in pinned host memory updated by the host stream, gradients and
weights copied between the arenas every step. The update is the same math
on the same kernels, so a small GPT's losses must equal the on-device
optimizer's bit for bit, in fp32 and with --precision=bf16; and 3 steps,
checkpoint, resume 3 more must equal 6 straight (the pinned state and the
working copies are checkpointed).
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import binary_losses, parse_args, pattern_tokens  # noqa: E402

GPT = "gpt:layers=2,d_model=32,heads=2,vocab=64,seq=16,batch=4"
HW = os.path.join(os.path.dirname(__file__), "Inputs", "slow-cpu.json")


def main():
    a = parse_args()
    data = os.path.join(a.tmp, "tokens.bin")
    pattern_tokens(data, 64, 5000)
    loomc = os.path.join(a.bin, "loomc")
    loomopt = os.path.join(a.bin, "loom-opt")
    ok = True
    for precision in ("fp32", "bf16"):
        losses = {}
        for mode in ("none", "cpu", "static:0.5", "interleaved"):
            b = os.path.join(a.tmp, f"{precision}-{mode.replace(':', '')}")
            # A host whose CPU is far slower than its PCIe (the planner puts
            # nothing on it).
            hw = [f"--hardware={HW}", "--sub-group-size=3000"] if mode == "interleaved" else []
            subprocess.run([loomc, "--model", GPT, "--lr=3e-3", f"--precision={precision}",
                            f"--optimizer-offload={mode}", *hw, "-o", b], check=True,
                           stderr=subprocess.DEVNULL)
            losses[mode] = binary_losses(b, data, b + ".json", "--steps", "6")
        # Every placement in one schedule, written by hand on the subgroups
        # (gpu, stream, cpu in turn) and applied by loom-offload-optimizer.
        b = os.path.join(a.tmp, f"{precision}-subgroups")
        step = subprocess.run([loomc, "--model", GPT, "--lr=3e-3", f"--precision={precision}",
                               "--compile-to=optimizer"], check=True, capture_output=True,
                              text=True).stdout
        grouped = subprocess.run([loomopt, "--loom-optimizer-subgroups=sub-group-size=3000"],
                                 input=step, check=True, capture_output=True, text=True).stdout
        places = iter(["gpu", "stream", "cpu"] * 100)
        planned = re.sub(r"(loom\.subgroup @sg\d+ \[[^\]]*\] numel \d+)",
                         lambda m: f'{m.group(1)} update {next(places)}', grouped)
        with open(b + ".mlir", "w") as f:
            f.write(subprocess.run([loomopt, "--loom-offload-optimizer=mode=subgroups"],
                                   input=planned, check=True, capture_output=True,
                                   text=True).stdout)
        subprocess.run([loomc, b + ".mlir", "-o", b], check=True)
        losses["subgroups"] = binary_losses(b, data, b + ".json", "--steps", "6")
        # Small subgroups, most on the CPU, with the host thread
        # (loom-offload-optimizer's host-thread option moves the CPU
        # updates into the backward): the first device gradients are
        # released a few tasks later, inside the backward.
        places = iter(["cpu", "cpu", "cpu", "stream", "cpu", "gpu", "cpu"] * 100)
        small = subprocess.run([loomopt, "--loom-optimizer-subgroups=sub-group-size=600"],
                               input=step, check=True, capture_output=True, text=True).stdout
        threaded = re.sub(r"(loom\.subgroup @sg\d+ \[[^\]]*\] numel \d+)",
                          lambda m: f'{m.group(1)} update {next(places)}', small)
        with open(b + "-thread.mlir", "w") as f:
            f.write(subprocess.run([loomopt, "--loom-offload-optimizer=mode=subgroups host-thread=true"],
                                   input=threaded,
                                   check=True, capture_output=True, text=True).stdout)
        subprocess.run([loomc, b + "-thread.mlir", "--host-thread=on", "-o", b + "-thread"],
                       check=True)
        losses["subgroups (host thread)"] = binary_losses(b + "-thread", data,
                                                          b + "-thread.json", "--steps", "6")
        # The same schedules with the CPU's updates on the step's host
        # thread (--host-thread=on; the CPU target's default is off): each
        # update queued after its gradient's copy, inside the backward, and
        # run while the step goes on.
        for mode in ("cpu", "interleaved"):
            b = os.path.join(a.tmp, f"{precision}-{mode}-thread")
            hw = [f"--hardware={HW}", "--sub-group-size=3000"] if mode == "interleaved" else []
            subprocess.run([loomc, "--model", GPT, "--lr=3e-3", f"--precision={precision}",
                            f"--optimizer-offload={mode}", "--host-thread=on", *hw, "-o", b],
                           check=True, stderr=subprocess.DEVNULL)
            losses[mode + " (host thread)"] = binary_losses(b, data, b + ".json", "--steps", "6")
        for mode in ("cpu", "static:0.5", "interleaved", "subgroups", "cpu (host thread)",
                     "interleaved (host thread)", "subgroups (host thread)"):
            same = losses["none"] == losses[mode]
            ok = ok and same and losses[mode][-1] < losses[mode][0]
            print(f"{precision}: offload {mode} vs on-device optimizer: "
                  f"{'identical' if same else 'DIFFERENT'} losses "
                  f"({losses[mode][0]:.5f} -> {losses[mode][-1]:.5f} over 6 steps)")
            if not same:
                print(losses)
    b = os.path.join(a.tmp, "fp32-cpu")
    ck = os.path.join(a.tmp, "ck")
    first = binary_losses(b, data, b + ".a.json", "--steps", "3", "--checkpoint-dir", ck,
                "--checkpoint-every", "3")
    second = binary_losses(b, data, b + ".b.json", "--steps", "3", "--checkpoint-dir", ck,
                           "--resume")
    straight = binary_losses(b, data, b + ".c.json", "--steps", "6")
    resumed = first + second == straight
    print(f"offload cpu, resumed after 3 steps: {'identical' if resumed else 'DIFFERENT'} losses")
    # The measured side of loomc --timeline: each step's backward and
    # update phases in the log, and as spans in the trace.
    trace = os.path.join(a.tmp, "trace.json")
    if os.path.exists(b + ".d.json"):  # the driver appends to a log (resume)
        os.remove(b + ".d.json")
    subprocess.run([b, "--data", data, "--steps", "2", "--log-json", b + ".d.json",
                    "--trace", trace], check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(b + ".d.json")]
    phased = all(r["backward_ms"] > 0 and abs(r["backward_ms"] + r["update_ms"] - r["step_ms"]) < 1e-3
                 for r in rows)
    # The host's own updates: when the first began and their sum, and a
    # span each on the trace's cpu lane (every parameter, both steps).
    phased = phased and all(0 < r["cpu_update_start_ms"] < r["step_ms"] and
                            0 < r["cpu_update_ms"] <= r["step_ms"] for r in rows)
    spans = [e["name"] for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    n_params = step.count("loom.adam ")  # the optimizer phase compiled above
    phased = (phased and spans.count("forward_backward") == 2 and spans.count("update") == 2
              and n_params > 0 and spans.count("adam") == 2 * n_params)
    print(f"offload cpu, phases: {'timed' if phased else 'MISSING'} (log: backward_ms, update_ms, "
          f"cpu_update_start_ms, cpu_update_ms; trace: {sorted(set(spans))})")
    if not (ok and resumed and phased):
        sys.exit(1)


if __name__ == "__main__":
    main()
