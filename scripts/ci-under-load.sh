#!/usr/bin/env bash
# The CI run as the CI machine may see it (issue 41): a clean clone of
# HEAD, `.ci/run` in it, with one CPU-bound process busy beside it the
# whole time (a shared machine's other work). Prints .ci/run's phase times
# and its exit code; the clone is left in $LOOM_CI_DIR for a look.
#   scripts/ci-under-load.sh                 # clone into /tmp/loom-ci-under-load
#   LOOM_CI_DIR=/path scripts/ci-under-load.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${LOOM_CI_DIR:-/tmp/loom-ci-under-load}"
rm -rf "$DIR"
git clone -q . "$DIR"
echo "[ci-under-load] $(git rev-parse --short HEAD) cloned into $DIR; one busy loop beside .ci/run"
sh -c 'while :; do :; done' &
busy=$!
trap 'kill $busy 2>/dev/null || true' EXIT
rc=0
(cd "$DIR" && .ci/run) || rc=$?
echo "[ci-under-load] .ci/run exited $rc"
exit $rc
