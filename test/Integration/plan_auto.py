"""loomc --plan=auto (issue 49) on CPU ranks, fp32: the plan the search
chooses for a small GPT on node=2,gpu=2 (4 ranks) compiles to a binary
that trains to one rank's losses on the same global batch within 1e-6
over 20 steps; so does the best plan with a pipeline (forced
--pipeline-parallel=2: the search picks the rest). Standard library only."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import LossCheck, compiler, losses, noisy_pattern, parse_args, train  # noqa: E402

a = parse_args()
compile_ = compiler(os.path.join(a.bin, "loomc"), a.tmp)
STEPS = 20
data = os.path.join(a.tmp, "tokens.bin")
noisy_pattern(data, 64, 20000)
spec = "gpt:layers=4,d_model=32,heads=4,vocab=64,seq=8,batch=16"
check = LossCheck(STEPS, 1e-6)
ref = losses(train(compile_("one", spec), 1, data, STEPS, os.path.join(a.tmp, "one.jsonl")))
for name, extra in (("auto", []), ("auto-pp", ["--pipeline-parallel=2"])):
    report = os.path.join(a.tmp, name + ".json")
    exe = compile_(name, spec, "--hardware=cpu-host", "--topology=node=2,gpu=2", "--plan=auto",
                   "--plan-report", report, *extra)
    d = json.load(open(report))
    chosen = " ".join(d["chosen"]["flags"])
    print(f"{name}: {len(d['candidates'])} candidates, chose {chosen or '(the flags given)'}")
    check.compare(f"{name}: the chosen plan on 4 ranks",
                  losses(train(exe, 4, data, STEPS, os.path.join(a.tmp, name + ".jsonl"))), ref)
