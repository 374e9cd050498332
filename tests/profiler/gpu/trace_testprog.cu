// A small CUDA program for `kloop profile` fixtures: NVTX ranges around a bandwidth-bound copy, an FMA loop,
// a launch-bound burst of tiny kernels, a sync-per-kernel loop, and memcpy/memset traffic.
#include <cstdio>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);                       \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

__global__ void k_copy(const float4* __restrict__ a, float4* __restrict__ b, size_t n)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        b[i] = a[i];
}

__global__ void k_fma(float* out, int iters)
{
    float x = threadIdx.x, y = 1.0001f, z = 0.5f, w = 0.25f;
    for (int i = 0; i < iters; ++i) {
        x = fmaf(x, y, z);
        z = fmaf(z, y, w);
        w = fmaf(w, y, x);
    }
    if (x + z + w == 12345.f)
        *out = x;
}

__global__ void k_tiny(float* p)
{
    p[threadIdx.x] += 1.f;
}

int main()
{
    nvtxRangePushA("setup");
    const size_t n = size_t(64) << 20; // 64M float4 = 1 GiB per buffer
    float4 *a = nullptr, *b = nullptr;
    float* small = nullptr;
    CK(cudaMalloc(&a, n * sizeof(float4)));
    CK(cudaMalloc(&b, n * sizeof(float4)));
    CK(cudaMalloc(&small, 1024 * sizeof(float)));
    CK(cudaMemset(a, 0, n * sizeof(float4)));
    static float host[1 << 20];
    CK(cudaMemcpy(small, host, 1024 * sizeof(float), cudaMemcpyHostToDevice));
    nvtxRangePop();

    nvtxRangePushA("copy phase");
    for (int i = 0; i < 3; ++i)
        k_copy<<<132 * 16, 256>>>(a, b, n);
    CK(cudaDeviceSynchronize());
    nvtxRangePop();

    nvtxRangePushA("fma phase");
    k_fma<<<132 * 8, 256>>>(small, 8192);
    CK(cudaDeviceSynchronize());
    nvtxRangePop();

    nvtxRangePushA("launch-bound phase");
    for (int i = 0; i < 2000; ++i)
        k_tiny<<<1, 32>>>(small);
    CK(cudaDeviceSynchronize());
    nvtxRangePop();

    nvtxRangePushA("sync-per-kernel phase");
    for (int i = 0; i < 50; ++i) {
        k_tiny<<<1, 32>>>(small);
        CK(cudaStreamSynchronize(0));
    }
    nvtxRangePop();
    nvtxMarkA("done");

    CK(cudaMemcpy(host, small, 1024 * sizeof(float), cudaMemcpyDeviceToHost));
    std::printf("trace_testprog ok (%f)\n", host[0]);
    cudaFree(a);
    cudaFree(b);
    cudaFree(small);
    return 0;
}
