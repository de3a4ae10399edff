#!/usr/bin/env python3
"""ZeRO++'s hpZ (issue 19) on 8 CPU ranks (Open MPI) as three levels,
--topology=node=2,gpu=2,gcd=2, ZeRO-3: `--zeropp=hpz` keeps a secondary
partition of the parameters inside a node (the gpu and gcd levels), so the
backward's all-gathers run inside the node instead of over all 8 ranks.

  * the losses equal flat ZeRO-3's (the issue's bound: 1e-6; the values
    gathered are the same, so equal bit for bit), in fp32 and in bf16 with
    --recompute, on a GPT whose sizes are odd (vocabulary 61, width 30, 3
    heads of 10: no "multiple of 8" anywhere); in bf16 without
    --recompute the backward uses the forward's bf16 casts and gathers
    nothing, so hpZ changes nothing (checked too);
  * the bytes a step, counted by the runtime per communicator, are what
    the plan says exactly: with S the bytes of one rank's shard of the
    parameters, flat ZeRO-3 sends (W-1)S for the forward's all-gather,
    (W-1)S for the backward's and (W-1)S for the gradients' reduce-scatter
    (W = 8 ranks) plus 7 bytes for the loss; hpZ sends the backward's
    inside the node instead, (G-1)(W/G)S over the node's group (G = 4
    ranks a node), counted under that group's levels ("0,1").
    zeropp.py --bin BIN --tmp TMP
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import noisy_pattern, parse_args, run, train  # noqa: E402

KEYS = "layers=2,d_model=30,heads=3,vocab=61,seq=16,batch=8"
W, G, STEPS = 8, 4, 6


def main():
    a = parse_args()
    data = os.path.join(a.tmp, "tokens.bin")
    noisy_pattern(data, 61, 20000)
    bad = []
    for precision, more in (("fp32", []), ("bf16", ["--recompute"]), ("bf16", [])):
        logs = {}
        for name, extra in (("flat", []), ("hpz", ["--zeropp=hpz"])):
            exe = os.path.join(a.tmp, f"{name}-{precision}{len(more)}")
            run([os.path.join(a.bin, "loomc"), "--model", f"gpt:{KEYS}", "--lr=3e-3",
                 f"--precision={precision}", "--topology=node=2,gpu=2,gcd=2", "--zero-stage=3",
                 *more, *extra, "-o", exe])
            logs[name] = train(exe, W, data, STEPS, exe + ".jsonl")
        flat, hpz = logs["flat"], logs["hpz"]
        err = max(abs(x["loss"] - y["loss"]) for x, y in zip(flat, hpz))
        fb = flat[-1]["comm_bytes"]
        if precision == "bf16" and not more:
            # The backward uses the forward's bf16 casts: it gathers
            # nothing, so hpZ has nothing to move (and keeps nothing).
            ok = err <= 1e-6 and hpz[-1]["comm_bytes"] == fb and \
                "comm_bytes_by_group" not in hpz[-1]
            print(f"bf16 without --recompute: hpZ losses {err:.1e} from flat ZeRO-3's; the "
                  f"backward gathers nothing, bytes a step {hpz[-1]['comm_bytes']} as flat's "
                  f"{fb} {'ok' if ok else 'FAIL'}")
            bad += [] if ok else ["bf16 without recompute"]
            continue
        s = (fb - 7) / (3 * (W - 1))  # bytes of one rank's shard
        want_node = (G - 1) * (W // G) * s
        want_all = fb - (W - 1) * s + want_node
        got_node = hpz[-1].get("comm_bytes_by_group", {}).get("0,1")
        ok_bytes = (s == int(s) and got_node == want_node and hpz[-1]["comm_bytes"] == want_all
                    and all(x["comm_bytes"] == hpz[-1]["comm_bytes"] for x in hpz))
        ok = err <= 1e-6 and ok_bytes
        print(f"{precision}{' --recompute' if more else ''}: hpZ losses {err:.1e} from flat ZeRO-3's (bound 1e-6; "
              f"{flat[0]['loss']:.4f} -> {flat[-1]['loss']:.4f}); bytes a step: flat {fb}, hpZ "
              f"{hpz[-1]['comm_bytes']} of which {got_node} inside the node (predicted "
              f"{int(want_all)} and {int(want_node)}) {'ok' if ok else 'FAIL'}")
        bad += [] if ok else [precision]
    if bad:
        sys.exit(f"hpZ checks failed: {bad}")


if __name__ == "__main__":
    main()
