#!/usr/bin/env bash
# On the development machine: the header-only libraries the runtime builds
# with (Debian's nlohmann-json3-dev and libcxxopts-dev) into
# .carry/deps/include, for GPU hosts, which have neither. Carry .carry/deps
# with every GPU call that builds the runtime; runtime/CMakeLists.txt looks
# there when the system has no copy.
#   bench/carry-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
D=.carry/deps/include
rm -rf .carry/deps && mkdir -p "$D"
cp -r /usr/include/nlohmann "$D/"
cp /usr/include/cxxopts.hpp "$D/"
du -sh .carry/deps
