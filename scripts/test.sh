#!/usr/bin/env bash
# Sets up, builds and runs every test: the lit suite (check-loom) and the
# unit tests, all through ctest, with the HIP runtime built first
# (scripts/build-hip.sh: the lit suite links a generated HIP training binary
# against it; LOOM_SKIP_HIP=1 skips it); then the hostile-input job
# (scripts/sanitize.sh: the suites again under ASan + UBSan, and each fuzz
# target for a bounded time). LOOM_SKIP_SANITIZE=1 skips that job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${LOOM_SKIP_HIP:-0}" != 1 ]; then
  scripts/build-hip.sh
fi
BUILD_DIR="${LOOM_BUILD_DIR:-build}"
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$(nproc)")
if [ "${LOOM_SKIP_SANITIZE:-0}" != 1 ]; then
  scripts/sanitize.sh
fi
