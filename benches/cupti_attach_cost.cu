// What a CUDA graph launch costs on the host once CUPTI is attached to the process, whether or
// not anything is traced, and whether detaching (cuptiFinalize) gives it back.
//
//   cupti_attach_cost MODE NODES LAUNCHES
//
// MODE is what attaches CUPTI after the `plain` phase:
//   subscribe  cuptiSubscribe with no callback enabled
//   activity   cuptiActivityRegisterCallbacks, no activity kind enabled
//   kernels    as activity, plus CONCURRENT_KERNEL during the `attached` phase (then disabled)
//   PIECE+PIECE…  what `gapscope record` enables, piece by piece: both a subscriber (callbacks do
//              nothing) and activity buffers, plus during `attached` any of
//                kernels   CONCURRENT_KERNEL
//                api       RUNTIME and DRIVER activity (every call recorded)
//                filter    RUNTIME and DRIVER activity with only the launch call ids recorded
//                          (cuptiActivityEnable{Runtime,Driver}Api, CUPTI >= 12.6)
//                mem       MEMCPY, MEMSET and SYNCHRONIZATION activity
//                buildcb   API callbacks on the capture, instantiate and event calls
//                launchcb  API callbacks on cudaGraphLaunch/cuGraphLaunch, left on when paused
//              all disabled for `paused` except launchcb, which is what a trace budget leaves on;
//              no `detached` phase (a graph launched under kernel tracing faults after it).
// Phases: plain (no CUPTI call yet), attached, paused (kinds disabled, buffers flushed),
// detached (after cuptiFinalize). Graph `early` is instantiated before CUPTI is touched and is
// never launched while kernels are traced; graph `traced` is launched in the `attached` phase.
// One line per phase and graph: the median host time of cudaGraphLaunch (steady clock around
// the call) and the device period per launch (CUDA events). A launch that fails after the
// detach is reported as `fault=` and ends the run (the context is unusable after a fault).
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CUDA_OK(x)                                                                       \
  do {                                                                                   \
    cudaError_t status_ = (x);                                                           \
    if (status_ != cudaSuccess) {                                                        \
      fprintf(stderr, "CUDA error %s at line %d\n", cudaGetErrorString(status_), __LINE__); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)
#define CUPTI_OK(x)                                                                \
  do {                                                                             \
    CUptiResult status_ = (x);                                                     \
    if (status_ != CUPTI_SUCCESS) {                                                \
      const char* text_;                                                           \
      cuptiGetResultString(status_, &text_);                                       \
      fprintf(stderr, "CUPTI error %s at line %d\n", text_, __LINE__);            \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

__global__ void bump(float* p, int i) {
  if (threadIdx.x == 0) p[i] += 1.0f;
}

static size_t records = 0;
static void CUPTIAPI request_buffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}
static void CUPTIAPI buffer_done(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) records++;
  free(buffer);
}
static void CUPTIAPI ignore_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

// Graph-building calls `gapscope record` watches (a subset: enough to switch CUPTI's API
// callback path on for them).
static const CUpti_CallbackId build_driver_cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2, CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,
    CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags};
static const CUpti_CallbackId build_runtime_cbids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010};

struct Pieces {
  bool kernels = false, api = false, filter = false, mem = false, buildcb = false,
       launchcb = false;
};

static bool parse_pieces(const char* mode, Pieces* p) {
  if (!strchr(mode, '+') && strcmp(mode, "launchcb") && strcmp(mode, "api") &&
      strcmp(mode, "filter") && strcmp(mode, "mem") && strcmp(mode, "buildcb"))
    return false;
  char copy[256];
  snprintf(copy, sizeof copy, "%s", mode);
  for (char* piece = strtok(copy, "+"); piece; piece = strtok(nullptr, "+")) {
    if (!strcmp(piece, "kernels")) p->kernels = true;
    else if (!strcmp(piece, "api")) p->api = true;
    else if (!strcmp(piece, "filter")) p->filter = true;
    else if (!strcmp(piece, "mem")) p->mem = true;
    else if (!strcmp(piece, "buildcb")) p->buildcb = true;
    else if (!strcmp(piece, "launchcb")) p->launchcb = true;
    else {
      fprintf(stderr, "unknown piece %s\n", piece);
      exit(2);
    }
  }
  return true;
}

// Switches the pieces' kinds and callbacks on or off (launchcb only ever on).
static void switch_pieces(const Pieces& p, CUpti_SubscriberHandle sub, bool on) {
  auto kind = [&](CUpti_ActivityKind k) {
    CUPTI_OK(on ? cuptiActivityEnable(k) : cuptiActivityDisable(k));
  };
  if (p.kernels) kind(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (p.api || p.filter) {
    kind(CUPTI_ACTIVITY_KIND_RUNTIME);
    kind(CUPTI_ACTIVITY_KIND_DRIVER);
  }
  if (p.filter && on) {
    // Every call off, then the launches on, as record's per-call filter does.
    for (CUpti_CallbackId id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; id++)
      cuptiActivityEnableRuntimeApi(id, 0);
    for (CUpti_CallbackId id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; id++)
      cuptiActivityEnableDriverApi(id, 0);
    CUPTI_OK(cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, 1));
    CUPTI_OK(cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 1));
    CUPTI_OK(cuptiActivityEnableDriverApi(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 1));
  }
  if (p.mem) {
    kind(CUPTI_ACTIVITY_KIND_MEMCPY);
    kind(CUPTI_ACTIVITY_KIND_MEMSET);
    kind(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  }
  if (p.buildcb) {
    for (CUpti_CallbackId id : build_driver_cbids)
      CUPTI_OK(cuptiEnableCallback(on, sub, CUPTI_CB_DOMAIN_DRIVER_API, id));
    for (CUpti_CallbackId id : build_runtime_cbids)
      CUPTI_OK(cuptiEnableCallback(on, sub, CUPTI_CB_DOMAIN_RUNTIME_API, id));
  }
  if (p.launchcb && on) {
    CUPTI_OK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
                                 CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000));
    CUPTI_OK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                                 CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch));
  }
}

static double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s subscribe|activity|kernels NODES LAUNCHES\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  const int nodes = atoi(argv[2]), launches = atoi(argv[3]);
  Pieces pieces;
  const bool piecewise = parse_pieces(mode, &pieces);
  const bool subscribe = strcmp(mode, "subscribe") == 0, kernels = strcmp(mode, "kernels") == 0;
  if ((!piecewise && !subscribe && !kernels && strcmp(mode, "activity") != 0) || nodes < 1 ||
      launches < 10) {
    fprintf(stderr, "usage: %s subscribe|activity|kernels|PIECE+PIECE... NODES LAUNCHES (>= 10)\n",
            argv[0]);
    return 2;
  }
  float* data;
  CUDA_OK(cudaMalloc(&data, sizeof(float) * nodes));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  auto instantiate = [&]() {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < nodes; i++) bump<<<1, 32, 0, stream>>>(data, i);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphDestroy(graph));
    return exec;
  };
  auto measure = [&](const char* phase, cudaGraphExec_t exec, const char* name) {
    std::vector<double> host;
    host.reserve(launches);
    for (int i = 0; i < 20; i++) CUDA_OK(cudaGraphLaunch(exec, stream));
    cudaError_t warm = cudaStreamSynchronize(stream);
    if (warm != cudaSuccess) {
      printf("mode=%s nodes=%d phase=%s graph=%s fault=%s\n", mode, nodes, phase, name,
             cudaGetErrorName(warm));
      exit(0);
    }
    CUDA_OK(cudaEventRecord(start, stream));
    for (int i = 0; i < launches; i++) {
      double t0 = now_us();
      CUDA_OK(cudaGraphLaunch(exec, stream));
      host.push_back(now_us() - t0);
    }
    CUDA_OK(cudaEventRecord(stop, stream));
    CUDA_OK(cudaEventSynchronize(stop));
    float ms;
    CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
    std::sort(host.begin(), host.end());
    printf("mode=%s nodes=%d phase=%s graph=%s host_us=%.3f device_period_us=%.3f\n", mode, nodes,
           phase, name, host[host.size() / 2], ms * 1e3 / launches);
    fflush(stdout);
  };

  cudaGraphExec_t early = instantiate(), traced = instantiate();
  measure("plain", early, "early");
  measure("plain", traced, "traced");

  CUpti_SubscriberHandle subscriber;
  if (piecewise) {
    CUPTI_OK(cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)ignore_callback, nullptr));
    CUPTI_OK(cuptiActivityRegisterCallbacks(request_buffer, buffer_done));
    switch_pieces(pieces, subscriber, true);
    measure("attached", traced, "traced");
    switch_pieces(pieces, subscriber, false);
    CUDA_OK(cudaDeviceSynchronize());
    CUPTI_OK(cuptiActivityFlushAll(1));
    measure("paused", early, "early");
    measure("paused", traced, "traced");
    fprintf(stderr, "%zu activity records\n", records);
    return 0;
  }
  if (subscribe) {
    CUPTI_OK(cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)ignore_callback, nullptr));
  } else {
    CUPTI_OK(cuptiActivityRegisterCallbacks(request_buffer, buffer_done));
  }
  if (kernels) CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  measure("attached", traced, "traced");

  if (kernels) CUPTI_OK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CUDA_OK(cudaDeviceSynchronize());
  if (!subscribe) CUPTI_OK(cuptiActivityFlushAll(1));
  measure("paused", early, "early");
  measure("paused", traced, "traced");

  if (subscribe) CUPTI_OK(cuptiUnsubscribe(subscriber));
  CUDA_OK(cudaDeviceSynchronize());
  CUPTI_OK(cuptiFinalize());
  measure("detached", early, "early");
  measure("detached", traced, "traced");  // last: a fault here poisons the context
  fprintf(stderr, "%zu activity records\n", records);
  return 0;
}
