# Sourced by the scripts that run loomc's generated training binaries on a
# GPU host (which has CUDA but no MLIR): builds the runtime there once and
# links a generated source against it.
#   build_runtime            cmake + ninja into build-bench; sets RT (logs in $OUT)
#   link_binary SRC.cpp EXE [-O1]
build_runtime() {
  cmake -G Ninja -S bench -B build-bench > "$OUT/cmake.log" 2>&1 &&
    ninja -C build-bench loomrt_shared > "$OUT/ninja.log" 2>&1 ||
    { echo "build failed"; tail -20 "$OUT/ninja.log"; exit 1; }
  RT="$PWD/build-bench/runtime"
}
link_binary() {
  c++ "${3:--O0}" -std=c++17 -I runtime/include "$1" -o "$2" -L"$RT" -lloomrt -Wl,-rpath,"$RT"
}
