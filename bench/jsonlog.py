"""The bench scripts' reader of a training binary's --log-json: one dict
per step, [] when the run left no log (it failed; the script said so)."""
import json


def steps(out, name):
    try:
        return [json.loads(line) for line in open(f"{out}/{name}.jsonl")]
    except OSError:
        return []
