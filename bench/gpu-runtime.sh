# Sourced by the scripts that run loomc's generated training binaries on a
# GPU host (which has CUDA but no MLIR): builds the runtime there once and
# links a generated source against it.
#   build_runtime [TARGET [CMAKE_ARGS...]]
#                            cmake + ninja TARGET (default loomrt_shared) into
#                            build-bench; sets RT (logs in $OUT)
#   nccl_root                the NCCL of the host's PyTorch (pip's nvidia.nccl)
#   link_binary SRC.cpp EXE [-O1]
#   link_gz SRC.cpp.gz EXE   a gzipped generated source linked at -O1 (its
#                            errors in $OUT/EXE's name.compile.log)
#   build_kernel_times       bench/kernel_times.cpp (CUPTI) as /tmp/libkt.so
#   write_tokens VOCAB FILE [N]  N (default 4M) uint16 tokens below VOCAB
#                            (numpy seed 0), the data the binaries train on
build_runtime() {
  local target=${1:-loomrt_shared}
  shift $(($# > 0 ? 1 : 0))
  cmake -G Ninja -S bench -B build-bench "$@" > "$OUT/cmake.log" 2>&1 &&
    ninja -C build-bench "$target" > "$OUT/ninja.log" 2>&1 ||
    { echo "build failed"; tail -20 "$OUT/ninja.log"; exit 1; }
  RT="$PWD/build-bench/runtime"
}
nccl_root() {
  python3 -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])"
}
link_binary() {
  c++ "${3:--O0}" -std=c++17 -I runtime/include "$1" -o "$2" -L"$RT" -lloomrt -Wl,-rpath,"$RT"
}
link_gz() {
  local name
  name=$(basename "$2")
  gunzip -c "$1" > "$2.cpp" && link_binary "$2.cpp" "$2" -O1 2> "$OUT/$name.compile.log" ||
    echo "compiling $name failed"
}
build_kernel_times() {
  local cuda=${CUDA_HOME:-/usr/local/cuda}
  c++ -O2 -shared -fPIC bench/kernel_times.cpp -I"$cuda/include" -L"$cuda/lib64" -lcupti \
    -Wl,-rpath,"$cuda/lib64" -o /tmp/libkt.so || { echo "kernel_times failed to build"; exit 1; }
}
write_tokens() {
  python3 -c "
import numpy as np; np.random.seed(0)
np.random.randint(0, $1, ${3:-4_000_000}, dtype=np.uint16).tofile('$2')"
}
