#!/usr/bin/env bash
# Installs every system package Loom needs (Debian 12, apt-get only), then
# configures and builds. Idempotent and quiet when nothing is missing.
#   scripts/setup.sh            # packages + build into ./build
#   LOOM_BUILD_DIR=dir scripts/setup.sh
#   LOOM_SKIP_BUILD=1 scripts/setup.sh   # packages only
#   LOOM_BUILD_TARGETS="loomc loomrt_shared" scripts/setup.sh   # those targets only
#     (scripts/run-example.sh builds the compiler and the runtime it needs,
#     not the tests and benchmarks)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache git python3
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  googletest libgtest-dev libopenblas-dev python3-torch python3-networkx
  libonnx-dev libprotobuf-dev protobuf-compiler
  libopenmpi-dev openmpi-bin
  # The runtime's JSON (nlohmann-json) and command-line (cxxopts) parsers,
  # header-only.
  nlohmann-json3-dev libcxxopts-dev
  # The sanitizer and fuzzing job (scripts/sanitize.sh): clang with its
  # sanitizer and libFuzzer runtimes, and its OpenMP.
  clang-22 libclang-rt-22-dev libomp-22-dev
)
# The HIP build (scripts/build-hip.sh sets LOOM_HIP=1): HIP's headers and
# host runtime, ROCm's device libraries, and clang-22's AMDGPU linker and
# offload bundler (docs/hip.md says why clang and not Debian's hipcc).
if [ "${LOOM_HIP:-0}" = 1 ]; then
  PACKAGES+=(libamdhip64-dev rocm-device-libs lld-22 clang-tools-22)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "${LOOM_SKIP_BUILD:-0}" = 1 ] && exit 0

BUILD_DIR="${LOOM_BUILD_DIR:-build}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  echo "[setup] configuring $BUILD_DIR"
  mkdir -p "$BUILD_DIR"
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >"$BUILD_DIR/configure.log" 2>&1 || {
    cat "$BUILD_DIR/configure.log"; exit 1; }
fi
# (Word-split on purpose: a list of ninja targets.)
# shellcheck disable=SC2206
TARGETS=(${LOOM_BUILD_TARGETS:-})
t0=$(date +%s)
echo "[setup] building in $BUILD_DIR${TARGETS[*]:+: ${TARGETS[*]}}"
ninja -C "$BUILD_DIR" "${TARGETS[@]}"
echo "[setup] build finished in $(($(date +%s) - t0)) s"
