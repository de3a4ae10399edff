// What scripts/check-portable-kernels.py must flag (and what it must not).
__device__ float sum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ float part[32];
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  cub::DeviceRadixSort::SortPairs(nullptr, temp, a, b, c, d, n, 0, bits, st);
  return v;
}
// Not findings: a comment that says 32 lanes and __shfl_xor_sync,
/* a block comment with wmma and 0xffffffff, */
const char *s = "32 and cudaMalloc in a string";
constexpr int kColTile = 32; // a named constant
int32_t fine = uint32_t(3) + 1.32f;
