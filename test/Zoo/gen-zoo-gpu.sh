#!/usr/bin/env bash
# Run here (where loomc is built): the CUDA sources of the zoo models that
# pass on the CPU (zoo.test's list), bf16, with their weights and references,
# into .carry/zoo for test/Zoo/run-zoo-gpu.sh on a GPU host.
#   test/Zoo/gen-zoo-gpu.sh [NAME ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin}
OUT=.carry/zoo
rm -rf "$OUT" && mkdir -p "$OUT"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
tar -C "$T" -xzf test/Zoo/zoo.tgz
names=("$@")
[ ${#names[@]} -gt 0 ] || read -r -a names <<< "$(grep -o 'check_zoo.py .*| FileCheck' test/Zoo/zoo.test |
  sed 's/.*--tmp %t\/run //; s/ | FileCheck//')"
cp "$T/zoo/tokens.bin" "$OUT/"
# The exports whose exporter folded parameters train as loomc trains them,
# without the reference's --frozen list (check_zoo.py's FOLDED).
folded=" $(cd test/Zoo && python3 -c 'import check_zoo; print(" ".join(check_zoo.FOLDED))') "
for n in "${names[@]}"; do
  frozen=$(python3 -c "import json,sys; print(','.join(json.load(open(sys.argv[1]))['frozen']))" "$T/zoo/$n.json")
  [[ "$folded" == *" $n "* ]] && frozen=
  # The references are PyTorch's without dropout (dropout-gpu.sh checks it on).
  off=$(grep -q '"dropout"' "$T/zoo/$n.json" && echo --dropout=off || true)
  "$BIN/loomc" "$T/zoo/$n.onnx" ${frozen:+--frozen=$frozen} $off --target=cuda --precision=bf16 \
    --compile-to=cpp -o "$OUT/$n.cpp" 2> "$OUT/$n.loomc.log"
  cp "$T/zoo/$n.json" "$OUT/"
  # A classifier's arrays (run-zoo-gpu.sh passes them as --input).
  cp "$T/zoo/$n".*.npy "$OUT/" 2>/dev/null || true
done
ls "$OUT" | wc -l
