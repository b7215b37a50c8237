// 10^7 (argv[1]) launches of an empty kernel from one thread: the recorder must keep up, and
// the trace stay within what it says it keeps (issue 25 f). Build: nvcc -O2 -o launches launches.cu
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void empty_kernel() {}

int main(int argc, char** argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000L;
    for (long i = 0; i < n; ++i) {
        empty_kernel<<<1, 1>>>();
        if ((i & 0xFFFF) == 0 && cudaGetLastError() != cudaSuccess) return 2;
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return 3;
    printf("hostile: {\"program\": \"launches\", \"kernels\": %ld}\n", n);
    return 0;
}
