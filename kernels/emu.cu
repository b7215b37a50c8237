// Stand-in kernels for gapscope's emulated collective and for examples/emu.rs (NVRTC, extern "C").
// `spin` and `coll` are exactly those of examples/probe/emu.cu; `coll_gather` is `coll` with the source
// split in two: slot `rank` of `dst` comes from `local`, every other slot from `peers`
// (the pre-filled maps of the other simulated ranks), so `dst` is a real all-gather result.
// Every kernel stamps %globaltimer: stamp[0] = start, stamp[1] = end.

__device__ __forceinline__ unsigned long long gt() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void spin(unsigned long long ns, unsigned long long* stamp) {
  unsigned long long t0 = gt(), t;
  do { t = gt(); } while (t - t0 < ns);
  if (threadIdx.x == 0) { stamp[0] = t0; stamp[1] = t; }
}

extern "C" __global__ void coll(const int4* src, int4* dst, int n, unsigned long long* stamp) {
  unsigned long long t0 = gt();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == 0) { stamp[0] = t0; stamp[1] = gt(); }
}

// n_per_rank: int4 elements per rank; dst holds ranks * n_per_rank elements.
extern "C" __global__ void coll_gather(const int4* local, const int4* peers, int4* dst, int n_per_rank,
                                       int ranks, int rank, unsigned long long* stamp) {
  unsigned long long t0 = gt();
  int n = n_per_rank * ranks;
  int lo = rank * n_per_rank, hi = lo + n_per_rank;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = (i >= lo && i < hi) ? local[i - lo] : peers[i];
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == 0) { stamp[0] = t0; stamp[1] = gt(); }
}
