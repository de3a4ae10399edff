#!/usr/bin/env bash
# Runs the README's main command first (scripts/run-example.sh, timed: a
# user's first run; LOOM_COLD_EXAMPLE=1 with ccache off), then sets up,
# builds and runs every test: the lit suite (one ctest entry per
# test directory, each with its own timeout: test/CMakeLists.txt) and the
# unit tests, all through ctest, with the HIP runtime built first
# (scripts/build-hip.sh: the lit suite links a generated HIP training binary
# against it; LOOM_SKIP_HIP=1 skips it); then the hostile-input job
# (scripts/sanitize.sh: the suites again under ASan + UBSan, and each fuzz
# target for a bounded time). LOOM_SKIP_SANITIZE=1 skips that job.
#
# It ends with each phase's wall time and the total (the CI budget: 30
# minutes on 2 cores from a clean clone with packages installed;
# docs/developing.md records the measured runs).
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_PHASE_FILE LOOM_RUN_START
LOOM_PHASE_FILE=$(mktemp "${TMPDIR:-/tmp}/loom-phases.XXXXXX")
LOOM_RUN_START=$(date +%s)
export LOOM_RUN_START_OWNER=test
source scripts/phases.sh
trap phase_summary EXIT
BUILD_DIR="${LOOM_BUILD_DIR:-build}"
# ctest's own default (1500 s) is never relied on: every entry carries a
# TIMEOUT property (test/CMakeLists.txt, runtime/tests), and this bounds any
# that does not.
CTEST_TIMEOUT="${LOOM_CTEST_TIMEOUT:-900}"

phase "packages" env LOOM_SKIP_BUILD=1 scripts/setup.sh
# The README's main command first, as a user's first run, its time printed
# (issue 46's bound for a cold first run: 10 minutes on 2 cores; printed,
# not enforced: a busier machine is slower, and that is not a failure). On
# a fresh machine it is cold; where ccache already holds the objects it is
# not, and LOOM_COLD_EXAMPLE=1 turns ccache off for it (about 5 minutes
# more on 2 cores: kept out of the default so that CI stays within its
# 40 minutes on a busy machine; docs/developing.md).
if [ "${LOOM_COLD_EXAMPLE:-0}" = 1 ]; then
  phase "main job, cold (run-example)" env CCACHE_DISABLE=1 scripts/run-example.sh
else
  phase "main job (run-example)" scripts/run-example.sh
fi
phase "build" scripts/setup.sh
if [ "${LOOM_SKIP_HIP:-0}" != 1 ]; then
  phase "HIP runtime build" scripts/build-hip.sh
fi
phase "main tests (ctest)" \
  bash -c "cd '$BUILD_DIR' && ctest --output-on-failure -j '$(nproc)' --timeout '$CTEST_TIMEOUT'"
if [ "${LOOM_SKIP_SANITIZE:-0}" != 1 ]; then
  scripts/sanitize.sh
fi
