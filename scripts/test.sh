#!/usr/bin/env bash
# Sets up, builds and runs every test: the lit suite (check-loom) and the
# unit tests, all through ctest. Ends with ctest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR="${LOOM_BUILD_DIR:-build}"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)"
