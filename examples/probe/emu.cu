// The one-GPU reproduction of the mode-2 gap that started gapscope (nvcc -O2 -o emu emu.cu && ./emu).
// Does the topology that NCCL graph usage mode 2 builds around a captured collective cost idle time on one GPU?
// step: spin(5us) -> coll (copy kernel standing in for the all-gather) -> spin(10us) -> spin(5us)
// mode 2: coll wrapped as NCCL strongstream does (side capture stream, external wait on serialEvent, record node after)
// mode 1: side capture stream joined without dependencies, no external nodes. Kernels stamp %globaltimer.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)
__device__ __forceinline__ unsigned long long gt() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__global__ void spin(unsigned long long ns, unsigned long long* stamp) {
  unsigned long long t0 = gt(), t; do { t = gt(); } while (t - t0 < ns);
  if (threadIdx.x == 0) { stamp[0] = t0; stamp[1] = t; }
}
__global__ void coll(const int4* src, int4* dst, int n, unsigned long long* stamp) {
  unsigned long long t0 = gt();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == 0) { stamp[0] = t0; stamp[1] = gt(); }
}
int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 500;
  bool single = argc > 2 && argv[2][0] == 's';  // one executable graph replayed, instead of one per step
  int alt = argc > 2 && argv[2][0] == 'a' ? 2 : 0;  // 'alt': two executable graphs taking turns
  int n = 8 * 8192 / 16; // 8 ranks x 8 KiB routing map
  int4 *src, *dst; unsigned long long* st; CK(cudaMalloc(&src, n * 16)); CK(cudaMalloc(&dst, n * 16)); CK(cudaMalloc(&st, 8 * 8 * iters));
  cudaStream_t s, c; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
  cudaEvent_t serial, scratch, a, b; CK(cudaEventCreateWithFlags(&serial, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&scratch, cudaEventDisableTiming));
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  CK(cudaEventRecord(serial, s));
  auto step = [&](int mode, bool capturing, unsigned long long* p) {
    spin<<<1, 32, 0, s>>>(5000, p + 0);
    if (capturing) {
      CK(cudaEventRecord(scratch, s)); CK(cudaStreamWaitEvent(c, scratch, 0));
      CK(cudaStreamUpdateCaptureDependencies(c, nullptr, nullptr, 0, cudaStreamSetCaptureDependencies));
      if (mode == 2) CK(cudaStreamWaitEvent(c, serial, cudaEventWaitExternal));
      CK(cudaEventRecord(scratch, c)); CK(cudaStreamWaitEvent(s, scratch, 0));
      coll<<<8, 256, 0, s>>>(src, dst, n, p + 2);
      CK(cudaEventRecord(scratch, s)); CK(cudaStreamWaitEvent(c, scratch, 0));
      if (mode == 2) {  // as NCCL's recordEventOnStream: explicit record node on c's frontier, c advanced to it
        cudaStreamCaptureStatus cs; cudaGraph_t gg; const cudaGraphNode_t* deps; size_t nd = 0; cudaGraphNode_t rn;
        CK(cudaStreamGetCaptureInfo(c, &cs, nullptr, &gg, &deps, nullptr, &nd));
        CK(cudaGraphAddEventRecordNode(&rn, gg, nullptr, 0, serial));
        for (size_t i = 0; i < nd; i++) CK(cudaGraphAddDependencies(gg, &deps[i], &rn, nullptr, 1));
        CK(cudaStreamUpdateCaptureDependencies(c, &rn, nullptr, 1, cudaStreamSetCaptureDependencies));
      }
    } else {
      if (mode == 2) CK(cudaStreamWaitEvent(s, serial, 0));
      coll<<<8, 256, 0, s>>>(src, dst, n, p + 2);
      if (mode == 2) CK(cudaEventRecord(serial, s));
    }
    spin<<<1, 32, 0, s>>>(10000, p + 4);
    spin<<<1, 32, 0, s>>>(5000, p + 6);
    if (capturing) { CK(cudaEventRecord(scratch, c)); CK(cudaStreamWaitEvent(s, scratch, 0)); }  // join c before the capture ends
  };
  for (int mode : {2, 1}) {
    for (int graphed : {0, 1}) {
      cudaGraphExec_t ge = nullptr; cudaGraph_t g = nullptr;
      std::vector<cudaGraphExec_t> execs;
      // one graph per step slot so each replay stamps its own slot
      if (graphed) {
        for (int i = 0; i < (single ? 1 : alt ? alt : iters); i++) {
          CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)); step(mode, true, st + 8 * i); CK(cudaStreamEndCapture(s, &g));
          CK(cudaGraphInstantiate(&ge, g, 0)); execs.push_back(ge);
          if (i == 0) { size_t nn = 0; CK(cudaGraphGetNodes(g, nullptr, &nn)); std::vector<cudaGraphNode_t> ns(nn); CK(cudaGraphGetNodes(g, ns.data(), &nn));
            int k = 0, w = 0, r = 0, o = 0; for (auto x : ns) { cudaGraphNodeType t; CK(cudaGraphNodeGetType(x, &t)); if (t == cudaGraphNodeTypeKernel) k++; else if (t == cudaGraphNodeTypeWaitEvent) w++; else if (t == cudaGraphNodeTypeEventRecord) r++; else o++; }
            printf("mode=%d graph nodes: kernels=%d evwait=%d evrecord=%d other=%d\n", mode, k, w, r, o); }
          CK(cudaGraphDestroy(g));
        }
        for (int i = 0; i < iters; i++) CK(cudaGraphLaunch(execs[single ? 0 : alt ? i % alt : i], s));  // warm
      } else { for (int i = 0; i < 50; i++) step(mode, false, st + 8 * (i % iters)); }
      CK(cudaStreamSynchronize(s));
      CK(cudaEventRecord(a, s));
      for (int i = 0; i < iters; i++) { if (graphed) CK(cudaGraphLaunch(execs[single ? 0 : alt ? i % alt : i], s)); else step(mode, false, st + 8 * i); }
      CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
      float ms; CK(cudaEventElapsedTime(&ms, a, b));
      std::vector<unsigned long long> h(8 * iters); CK(cudaMemcpy(h.data(), st, 8 * 8 * iters, cudaMemcpyDeviceToHost));
      std::vector<double> g1, g2, g3, g0, kd;
      if ((single || alt) && graphed) { auto* q = &h[0]; g1.push_back((q[2] - q[1]) / 1e3); g2.push_back((q[4] - q[3]) / 1e3); g3.push_back((q[6] - q[5]) / 1e3); g0.push_back(0); kd.push_back((q[3] - q[2]) / 1e3); }
      else for (int i = 1; i < iters; i++) { auto* q = &h[8 * i]; g1.push_back((q[2] - q[1]) / 1e3); g2.push_back((q[4] - q[3]) / 1e3); g3.push_back((q[6] - q[5]) / 1e3);
        g0.push_back((q[0] - h[8 * (i - 1) + 7]) / 1e3); kd.push_back((q[3] - q[2]) / 1e3); }
      auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
      printf("%s mode=%d %-7s period_us=%.2f gap_before_coll=%.2f coll_dur=%.2f gap_after_coll=%.2f gap_spin=%.2f gap_between_steps=%.2f\n", single ? "single-exec" : alt ? "two-execs-alternating" : "exec-per-step", mode, graphed ? "graphed" : "eager",
             ms * 1000 / iters, med(g1), med(kd), med(g2), med(g3), med(g0));
      for (auto x : execs) CK(cudaGraphExecDestroy(x));
    }
  }
}
