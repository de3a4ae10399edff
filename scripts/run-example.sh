#!/usr/bin/env bash
# Sets up, builds and runs Loom's main job on the bundled example: compile a
# small GPT (built-in generator) into a training step and train it a few
# steps on byte-level tokens of a text every Debian system ships, a line per
# step.
#
# loomc builds the model, differentiates it (loom-autodiff), attaches AdamW
# (loom-attach-optimizer), emits C++ over the runtime and compiles it into a
# training binary, which then trains on the CPU. The script also shows the
# hand-written mixed-placement step of examples/mlp_step.mlir and its stream
# schedule (loom-offload-optimizer and loom-interleave-offload produce such
# steps from a model: --optimizer-offload).
#
# It builds only what the example needs: loomc, loom-opt and the runtime
# (scripts/test.sh builds the tests and benchmarks). The first run on a
# 2-core machine with the packages installed takes about 7 minutes, almost
# all of it the build (docs/developing.md records the measured runs);
# later runs take seconds. Each step prints the time since the start.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
elapsed() {
  local s=$(($(date +%s) - START))
  printf '%d:%02d' $((s / 60)) $((s % 60))
}
echo "== 0. packages and build (loomc, loom-opt, the runtime)"
LOOM_BUILD_TARGETS="loomc loom-opt loomrt_shared" scripts/setup.sh
BUILD_DIR="${LOOM_BUILD_DIR:-build}"
BIN="$BUILD_DIR/bin"
# Batches of 8 x 64 bytes, read in order: 15 steps cover 7,680 of the
# text's 35,149 bytes, each step new text, and the loss falls at every one
# (5.43 -> 3.15). Longer runs reach the text's byte statistics (about 3.1)
# and stay there for hundreds of steps, where a passage unlike the rest
# (the capitals of "TERMS AND CONDITIONS", the sample program at the end)
# raises the loss of the step that reads it: that, not a fault, was the
# rise at the end of the earlier 30-step run of 4 x 32 bytes.
GPT="gpt:layers=2,d_model=64,heads=4,vocab=256,seq=64,batch=8"
TEXT=/usr/share/common-licenses/GPL-3
STEPS="${LOOM_EXAMPLE_STEPS:-15}"

echo
echo "== 1. tokens: bytes of $TEXT   [$(elapsed) elapsed]"
python3 examples/make_tokens.py "$TEXT" "$BUILD_DIR/gpl3.bin"

echo
echo "== 2. loomc --model $GPT --optimizer=adamw --lr=3e-3 -o $BUILD_DIR/gpt-train   [$(elapsed) elapsed]"
"$BIN/loomc" --model "$GPT" --optimizer=adamw --lr=3e-3 \
  -o "$BUILD_DIR/gpt-train" --emit-dir "$BUILD_DIR/gpt-train.src"
echo "   training binary $BUILD_DIR/gpt-train, its source in $BUILD_DIR/gpt-train.src/train.cpp"

echo
echo "== 3. $BUILD_DIR/gpt-train --data $BUILD_DIR/gpl3.bin --steps $STEPS   [$(elapsed) elapsed]"
"$BUILD_DIR/gpt-train" --data "$BUILD_DIR/gpl3.bin" --steps "$STEPS" --seed 1 \
  --log-json "$BUILD_DIR/gpt-train.log.json" | tee "$BUILD_DIR/gpt-train.out"
python3 - "$BUILD_DIR/gpt-train.log.json" "$STEPS" <<'PY'
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])][-int(sys.argv[2]):]
rises = sum(b > a for a, b in zip(losses, losses[1:]))
print(f"   loss {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} steps, "
      f"{'falling at every step' if not rises else f'{rises} step(s) up'}")
PY

echo
echo "== 4. a hand-written mixed-placement step (examples/mlp_step.mlir): its schedule   [$(elapsed) elapsed]"
"$BIN/loom-opt" examples/mlp_step.mlir --loom-optimizer-subgroups=sub-group-size=256 \
  | grep -E '^ *loom\.subgroup'
"$BIN/loom-opt" examples/mlp_step.mlir --loom-print-schedule -o /dev/null 2>&1 \
  | grep -E 'schedule of|h2d|d2h|cpu#|bytes moved'

echo
rm -f "$BUILD_DIR/gpt-train.log.json"
echo "Done in $(elapsed): the GPT was compiled into a training binary and trained $STEPS steps"
echo "on the CPU. ONNX models compile the same way (loomc model.onnx -o train,"
echo "docs/onnx.md); --precision=bf16, --topology/--zero-stage (several ranks,"
echo "docs/data-parallel.md) and --optimizer-offload are loomc flags (docs/cli.md);"
echo "--timeline writes the cost model's predicted step for a GPU host"
echo "(loomc --model gpt:layers=24,d_model=4096,heads=32,vocab=32000,seq=1024,batch=2"
echo " --precision=bf16 --optimizer-offload=interleaved --timeline step.json -o train)."
