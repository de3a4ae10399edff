#!/usr/bin/env bash
# The hostile-input job (issue 14), run by scripts/test.sh after the main
# suite: the compiler, the runtime and the tests built with clang-22 under
# AddressSanitizer + UndefinedBehaviorSanitizer (any report fails), their
# unit tests and lit suite, then every libFuzzer target for a bounded time
# from a seed corpus made of the test inputs. A crash, a hang (10 s per
# input) or a sanitizer report fails the job and leaves the input in
# $BUILD/fuzz/<target>/crash-*.
#
#   scripts/sanitize.sh                       # build-san/, 25 s per target
#   LOOM_FUZZ_SECONDS=600 scripts/sanitize.sh # longer fuzzing
#   LOOM_FUZZ_ONLY=1 scripts/sanitize.sh      # skip the test suites
#   LOOM_FUZZ_SEED=0 scripts/sanitize.sh      # a random libFuzzer seed (CI uses 1, so a
#                                             # clean clone's run explores the same inputs)
#
# The lit run leaves out test/Integration (numerics against PyTorch and
# multi-rank runs: minutes under ASan, and their code paths are the ones
# the Codegen and Tools tests already drive through sanitized binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/phases.sh
# Run alone, it prints its own phase times; under scripts/test.sh they join
# that run's list.
[ "${LOOM_RUN_START_OWNER:-}" ] || { export LOOM_RUN_START_OWNER=sanitize; trap phase_summary EXIT; }
LOOM_SKIP_BUILD=1 scripts/setup.sh
BUILD="${LOOM_SAN_BUILD_DIR:-build-san}"
SECONDS_PER_TARGET="${LOOM_FUZZ_SECONDS:-25}"
if [ ! -f "$BUILD/build.ninja" ]; then
  echo "[sanitize] configuring $BUILD (clang-22, ASan + UBSan, libFuzzer)"
  mkdir -p "$BUILD"
  # -O1 and no NDEBUG: asserts in LLVM's headers (cast<>) are checks too.
  CC=clang-22 CXX=clang++-22 cmake -G Ninja -S . -B "$BUILD" -DLOOM_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" \
    -DCMAKE_C_FLAGS_RELEASE="-O1 -g1" >"$BUILD/configure.log" 2>&1 || {
    cat "$BUILD/configure.log"; exit 1; }
fi
echo "[sanitize] building in $BUILD"
phase "sanitizer build" ninja -C "$BUILD"

export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
if [ "${LOOM_FUZZ_ONLY:-0}" != 1 ]; then
  echo "[sanitize] unit tests"
  CTEST_TIMEOUT="${LOOM_CTEST_TIMEOUT:-900}"
  phase "sanitizer unit tests" bash -c "cd '$BUILD' && ctest --output-on-failure -j '$(nproc)' \
      --timeout '$CTEST_TIMEOUT' -E '^lit|CommMpi'"
  # Open MPI's own start-up allocations are never freed (not Loom's leaks).
  phase "sanitizer MPI tests" bash -c "cd '$BUILD' && ASAN_OPTIONS='$ASAN_OPTIONS:detect_leaks=0' \
      ctest --output-on-failure --timeout '$CTEST_TIMEOUT' -R CommMpi"
  # (Tools/install.test links a user's project against the installed
  # runtime with the system compiler: a sanitized libloomrt needs the ASan
  # runtime in every program that links it, so it checks the shipping
  # build only.)
  echo "[sanitize] lit suite (without test/Integration, Tools/loomc-large.test and Tools/install.test)"
  phase "sanitizer lit" /usr/lib/llvm-22/bin/lit -sv "$BUILD/test" \
    --filter-out 'Integration/|Tools/loomc-large\.test|Tools/install\.test'
fi

# Seeds: the test inputs, split where a test file holds several cases.
FUZZ="$ROOT/$BUILD/fuzz"
mkdir -p "$FUZZ"
for t in onnx onnx-small mlir safetensors tokens npy hardware join cli; do mkdir -p "$FUZZ/seeds-$t"; done
# Command lines, one argument a line (the training binary's flags).
printf -- '--data\ntok.bin\n--steps=3\n--lr\n1e-3\n--input\nx=a.npy\n--resume' > "$FUZZ/seeds-cli/flags"
printf -- '-o\nout\n--init=random\nstray\n--seed=-1' > "$FUZZ/seeds-cli/mistakes"
# The hardware descriptions the benchmarks use, and joins of the old and the
# new protocol (a 12-byte card; a hello with a proof that cannot hold).
cp bench/hardware/*.json "$FUZZ/seeds-hardware/"
printf '\x01\x00\x00\x00\x7f\x00\x00\x01\x00\x01\x00\x00' > "$FUZZ/seeds-join/old-card"
{ printf 'LOOMJOIN\x01\x00\x00\x00'; head -c 32 /dev/zero; printf '\x01\x00\x00\x00'; head -c 40 /dev/zero; } \
  > "$FUZZ/seeds-join/hello-and-proof"
printf 'LOOM' > "$FUZZ/seeds-join/half-hello"
python3 test/Import/Inputs/hostile.py seeds "$FUZZ/seeds-onnx-small"
cp test/Import/Inputs/{mlp,mlp_eval,resize,gcn,folded,dynamic}.onnx test/Fuzz/regressions/onnx/* \
  "$FUZZ/seeds-onnx-small/"
# The byte-level target starts from the small models (a byte flip in a GPT's
# weights keeps it valid and costs a whole compile); the structure-aware one
# also from the exported GPT and Llama.
cp "$FUZZ"/seeds-onnx-small/* test/Import/Inputs/{gpt,llama}.onnx "$FUZZ/seeds-onnx/"
python3 test/Fuzz/make_seeds.py "$FUZZ"
for f in test/Fuzz/regressions/safetensors/* test/Fuzz/regressions/tokens/*; do
  [ -f "$f" ] && cp "$f" "$FUZZ/seeds-$(basename "$(dirname "$f")")/"
done

run_fuzzers() {
  local status=0 target name seeds dir
  for target in onnx-bytes:onnx-small onnx-proto:onnx mlir:mlir safetensors:safetensors tokens:tokens \
                npy:npy hardware:hardware join:join cli:cli; do
    name=${target%%:*}
    seeds=${target##*:}
    dir="$FUZZ/$name"
    mkdir -p "$dir/corpus"
    echo "[sanitize] fuzz-$name: $SECONDS_PER_TARGET s"
    if ! (cd "$dir" && "$ROOT/$BUILD/test/Fuzz/fuzz-$name" corpus "$FUZZ/seeds-$seeds" \
            -max_total_time="$SECONDS_PER_TARGET" -seed="${LOOM_FUZZ_SEED:-1}" -timeout=10 -rss_limit_mb=4096 \
            -max_len=65536 -print_final_stats=1 -close_fd_mask=1 >"$dir/log" 2>&1); then
      echo "[sanitize] fuzz-$name FAILED (input and log in $dir):"
      grep -aE "ERROR|runtime error|SUMMARY|Test unit written" "$dir/log" | head -20
      status=1
    else
      grep -aE "^stat::number_of_executed_units|DONE" "$dir/log" | tail -1
    fi
  done
  return $status
}
phase "fuzzers ($SECONDS_PER_TARGET s a target)" run_fuzzers
