# Sourced by the scripts that run loomc's generated training binaries on a
# GPU host (which has CUDA but no MLIR): builds the runtime there once and
# links a generated source against it.
#   build_runtime [TARGET [CMAKE_ARGS...]]   (carry .carry/deps: bench/carry-deps.sh)
#                            cmake + ninja TARGET (default loomrt_shared) into
#                            build-bench; sets RT (logs in $OUT)
#   nccl_root                the NCCL of the host's PyTorch (pip's nvidia.nccl)
#   link_binary SRC.cpp EXE [-O1]
#   compile_gz SRC.cpp.gz EXE  a gzipped generated source compiled at -O1
#                            to EXE.o (needs only runtime/include: it can
#                            run beside build_runtime); errors in
#                            $OUT/EXE's name.compile.log
#   link_gz SRC.cpp.gz EXE   compile_gz unless EXE.o exists, then links EXE
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
compile_gz() {
  local name
  name=$(basename "$2")
  gunzip -c "$1" > "$2.cpp" &&
    c++ -O1 -std=c++17 -I runtime/include -c "$2.cpp" -o "$2.o.part" 2> "$OUT/$name.compile.log" &&
    mv "$2.o.part" "$2.o" || echo "compiling $name failed"
}
link_gz() {
  [ -f "$2.o" ] || compile_gz "$1" "$2"
  [ -f "$2.o" ] && c++ "$2.o" -o "$2" -L"$RT" -lloomrt -Wl,-rpath,"$RT" 2>> "$OUT/$(basename "$2").compile.log" ||
    echo "linking $(basename "$2") failed"
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
