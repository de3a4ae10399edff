#!/usr/bin/env python3
"""The device memory loomc predicts (`--timeline`'s loom_prediction) is what
the binary reserves: the step simulation places buffers with the driver's
own arena policy (runtime/common/arena_policy.h) in the order the generated
code allocates and frees them, attention scratch included, plus the region
loom-plan-arena planned (the default; --arena=online leaves every buffer to
the runtime's arena). Checked on CPU
binaries (the CPU target's "device" is a second arena run by the same
driver), with the optimizer on the device and offloaded.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import parse_args, pattern_tokens  # noqa: E402

MODEL = "gpt:layers=2,d_model=256,heads=4,vocab=512,seq=128,batch=16"


def main():
    a = parse_args()
    data = os.path.join(a.tmp, "tokens.bin")
    pattern_tokens(data, 512, 20000)
    ok = True
    for mode, placement in (("none", "planned"), ("cpu", "planned"), ("none", "online"),
                        ("cpu", "online")):
        b = os.path.join(a.tmp, f"train-{mode}-{placement}")
        tl = b + ".timeline.json"
        subprocess.run([os.path.join(a.bin, "loomc"), "--model", MODEL, f"--optimizer-offload={mode}",
                        f"--arena={placement}", "--hardware=cpu-host", "--timeline", tl, "-o", b],
                       check=True,
                       stderr=subprocess.DEVNULL)
        pred = json.load(open(tl))["loom_prediction"]
        out = subprocess.run([b, "--data", data, "--steps", "2"], check=True, capture_output=True,
                             text=True).stdout
        m = re.search(r"step memory: ([0-9.]+) MiB of activations and workspace, ([0-9.]+) MiB", out)
        arena, state = float(m[1]), float(m[2])
        want_arena = pred["step_arena_bytes"] / 2**20
        want_state = pred["persistent_device_bytes"] / 2**20
        same = abs(arena - want_arena) < 0.05 and abs(state - want_state) < 0.05
        ok = ok and same
        print(f"{mode}, {placement}: step arena predicted {want_arena:.1f} MiB, reserved {arena:.1f}; "
              f"device state predicted {want_state:.1f} MiB, held {state:.1f}: "
              f"{'equal' if same else 'DIFFERENT'}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
