"""The bench scripts' reader of a training binary's --log-json: one dict
per step, [] when the run left no log (it failed; the script said so)."""
import json


def steps(out, name):
    try:
        return [json.loads(line) for line in open(f"{out}/{name}.jsonl")]
    except OSError:
        return []


def loss_table(out, columns, rows):
    """Prints a markdown table of runs against a reference run: `columns`
    names the leading cells, each row is (cells, name, reference name); the
    mean step of steps 6 on, the last loss, and the largest relative loss
    difference from the reference, step by step."""
    print("| " + " | ".join(columns) + " | mean step (steps 6-) | last loss | "
          "max rel. loss diff vs reference |")
    print("|" + "---|" * (len(columns) + 3))
    for cells, name, ref_name in rows:
        r, ref = steps(out, name), steps(out, ref_name)
        lead = " | ".join(str(c) for c in cells)
        if not r:
            print(f"| {lead} | failed | | |")
            continue
        ms = sum(x["step_ms"] for x in r[5:]) / max(1, len(r[5:]))
        d = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(r, ref)) \
            if ref else float("nan")
        print(f"| {lead} | {ms:.1f} ms | {r[-1]['loss']:.4f} | {d:.1e} |")
