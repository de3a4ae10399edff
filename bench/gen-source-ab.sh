#!/usr/bin/env bash
# On the development machine: the sources of bench/run-source-ab-gpu.sh into
# .carry/source-ab: for each model, NAME.base.cpp from BASE_LOOMC (a loomc built
# from the base commit: git worktree add /tmp/base BASE && cmake + ninja
# loomc there; ccache makes it cheap) and NAME.new.cpp from this tree's,
# plus NAME.params (the parameter count, for the MFU column), and the
# runtime tests' googletest.
#   bench/gen-source-ab.sh BASE_LOOMC [MODEL...]   (MODEL: gpt2 llama; default both)
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?usage: bench/gen-source-ab.sh BASE_LOOMC [gpt2] [llama]}
shift
NEW=${LOOMC:-build/bin/loomc}
C=.carry/source-ab
rm -rf "$C" && mkdir -p "$C"
[ -d .carry/googletest ] || cp -r /usr/src/googletest .carry/googletest
for model in "${@:-gpt2 llama}"; do
  for m in $model; do
    case $m in
    gpt2) spec=gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=16 ;;
    llama) spec=llama:layers=16,d_model=2048,heads=16,vocab=32000,seq=1024,batch=8,ffn=8192 ;;
    *) echo "unknown model $m" >&2; exit 1 ;;
    esac
    for which in base new; do
      L=$NEW; [ $which = base ] && L=$BASE
      "$L" --model "$spec" --target=cuda --precision=bf16 --compile-to=cpp -o "$C/$m.$which.cpp"
    done
    # Parameters: the elements the updates take (loomrt.adam's n, adam_multi's sizes).
    "$NEW" --model "$spec" --target=cuda --precision=bf16 --compile-to=lowered -o - 2>/dev/null |
      python3 -c "
import re, sys
n = 0
for line in sys.stdin:
    if 'loomrt.adam ' in line:
        n += int(re.search(r'\bn = ([0-9]+)', line)[1])
    elif 'loomrt.adam_multi' in line:
        n += sum(int(x) for x in re.search(r'sizes = array<i64: ([0-9, ]+)>', line)[1].split(','))
print(n)" > "$C/$m.params"
    echo "$m: $(cat "$C/$m.params") parameters"
  done
done
du -sh "$C"
