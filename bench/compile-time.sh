#!/usr/bin/env bash
# Compile time of loomc per phase against model depth: Llama-style models
# from the generator, 12 to 100 layers, timed to each phase in turn
# (optimizer = import + autodiff + optimizer passes; lowered = + the
# lowering to loomrt; cpp = + the C++ translation; binary = + the host
# compiler and link). Each phase's own time is the difference to the one
# before. Usage: bench/compile-time.sh [BUILD_DIR] [SHAPE]
#   SHAPE: d1024 (d 1024, 16 heads, seq 1024: the shape the lowering
#          issue measured the quadratic emitter on) or 70b (d 8192,
#          ffn 28672, 64 heads, seq 4096).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
SHAPE="${2:-70b}"
LOOMC="$BUILD/bin/loomc"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
case "$SHAPE" in
  d1024) SPEC="d_model=1024,heads=16,vocab=32000,seq=1024,batch=1" ;;
  70b) SPEC="d_model=8192,heads=64,ffn=28672,vocab=32000,seq=4096,batch=1" ;;
  *) echo "unknown shape '$SHAPE' (d1024 or 70b)" >&2; exit 2 ;;
esac
now() { date +%s.%N; }
timed() { # phase -> seconds to reach it
  local t0 t1
  t0=$(now)
  "$LOOMC" --model "llama:layers=$L,$SPEC" --compile-to="$1" -o "$TMP/out.$1" 2> "$TMP/err" ||
    { cat "$TMP/err" >&2; exit 1; }
  t1=$(now)
  awk "BEGIN { print $t1 - $t0 }"
}
# A phase's own time; separate runs, so a tiny phase may measure as 0.
d() { awk "BEGIN { x = $1 - $2; print x > 0 ? x : 0 }"; }
echo "loomc compile time, llama $SHAPE ($SPEC), $(nproc) cores, $(date -u +%F)"
printf "%7s %10s %10s %10s %10s %10s %12s\n" layers optimizer lowered cpp "c++ & link" total "cpp lines"
for L in 12 24 48 100; do
  o=$(timed optimizer); l=$(timed lowered); c=$(timed cpp); b=$(timed binary)
  lines=$(wc -l < "$TMP/out.cpp")
  printf "%7d %9.2fs %9.2fs %9.2fs %9.2fs %9.2fs %12d\n" "$L" "$o" \
    "$(d "$l" "$o")" "$(d "$c" "$l")" "$(d "$b" "$c")" "$b" "$lines"
done
