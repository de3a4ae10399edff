"""check_updates.py MODULE: Checks a loom module after loom-offload-optimizer: no op after a
loom.adam reads the weights or moments that adam updates in place (the
loaded values, through reshape, slice and shard views)."""
import re, sys

text = open(sys.argv[1]).read()
fn = text[text.index("func.func @train_step"):]
lines = fn.split("\n")
views = re.compile(r"^\s*(%[\w]+) = loom\.(reshape|slice|shard) (%[\w]+)")
adam = re.compile(r"= loom\.adam (%[\w]+), (%[\w]+), (%[\w]+), (%[\w]+)")
alias = {}
bad = 0
checked = 0
for i, l in enumerate(lines):
    m = views.match(l)
    if m:
        alias[m.group(1)] = alias.get(m.group(3), m.group(3))
    m = adam.search(l)
    if not m:
        continue
    checked += 1
    state = {m.group(1), m.group(3), m.group(4)}
    for later in lines[i + 1:]:
        if later.strip().startswith("loom.store") or "loom.adam" in later:
            continue
        used = set(re.findall(r"%[\w]+", later.split("=", 1)[-1] if "=" in later else later))
        if any(alias.get(u, u) in state for u in used):
            print("read after its update:", later.strip()[:120])
            bad += 1
print(f"{checked} updates checked, {bad} reads after an update")
