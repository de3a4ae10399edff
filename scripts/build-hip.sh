#!/usr/bin/env bash
# Builds the HIP runtime (AMD GPUs: gfx90a = MI250X, gfx942 = MI300X) into
# $LOOM_BUILD_DIR/runtime-hip, where `loomc --target=hip` links by default,
# after installing what it needs from Debian (LOOM_HIP=1 scripts/setup.sh).
# The main build must exist (scripts/setup.sh). No AMD GPU is needed: the
# kernels are compiled for both targets; nothing here runs them.
#   scripts/build-hip.sh                      # both targets
#   LOOM_HIP_ARCH="gfx90a" scripts/build-hip.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_HIP=1 LOOM_SKIP_BUILD=1 scripts/setup.sh
BUILD_DIR="${LOOM_BUILD_DIR:-build}"
HIP_DIR="$BUILD_DIR/runtime-hip"
ARCH="${LOOM_HIP_ARCH:-gfx90a;gfx942}"
LAUNCHER=()
# ccache as the main build uses it (CMakeLists.txt): paths relative to the
# source tree, so a second clone of the same commit compiles from the cache.
CCACHE_LAUNCHER="cmake;-E;env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;ccache"
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER="$CCACHE_LAUNCHER"
                                          -DCMAKE_C_COMPILER_LAUNCHER="$CCACHE_LAUNCHER")
if [ ! -f "$HIP_DIR/build.ninja" ]; then
  echo "[build-hip] configuring $HIP_DIR for $ARCH"
  mkdir -p "$HIP_DIR"
  cmake -G Ninja -S runtime -B "$HIP_DIR" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER=clang++-22 -DCMAKE_C_COMPILER=clang-22 "${LAUNCHER[@]}" \
    -DLOOMRT_ENABLE_HIP=ON -DLOOMRT_HIP_ARCH="$ARCH" -DLOOM_BUILD_TESTS=OFF \
    >"$HIP_DIR/configure.log" 2>&1 || { cat "$HIP_DIR/configure.log"; exit 1; }
fi
echo "[build-hip] building in $HIP_DIR"
ninja -C "$HIP_DIR" loomrt_shared
