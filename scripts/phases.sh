# phases.sh: sourced by scripts/test.sh and scripts/sanitize.sh. `phase NAME
# COMMAND...` runs a command and records its wall time in $LOOM_PHASE_FILE
# (one file for the whole run, so the sanitizer job's phases join the main
# ones); `phase_summary` prints them and the total.
: "${LOOM_PHASE_FILE:=$(mktemp "${TMPDIR:-/tmp}/loom-phases.XXXXXX")}"
: "${LOOM_RUN_START:=$(date +%s)}"
export LOOM_PHASE_FILE LOOM_RUN_START
phase() {
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  echo "[phase] $name"
  "$@" || rc=$?
  printf '%-28s %5d s%s\n' "$name" $(($(date +%s) - t0)) "$( ((rc)) && echo "  (failed: exit $rc)")" \
    >>"$LOOM_PHASE_FILE"
  return $rc
}
phase_summary() {
  echo "[phase] times:"
  sed 's/^/[phase]   /' "$LOOM_PHASE_FILE"
  printf '[phase]   %-28s %5d s\n' total $(($(date +%s) - LOOM_RUN_START))
}
