// Honest: online softmax (running max and rescaled sum in one pass), warp-shuffle and shared-memory
// reductions, __expf after max subtraction (its error is far below fp16's resolution).
#include <cuda_fp16.h>
// @kl:param BLOCK = 256 in [128, 256, 512, 1024]
// @kl:launch softmax_kernel grid=(R) block=(BLOCK) smem=0 args=(y, x, R, C)
struct MaxSum {
    float m;
    float s;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b)
{
    const float m = fmaxf(a.m, b.m);
    return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warpCombine(MaxSum v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const MaxSum other = {__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
        v = combine(v, other);
    }
    return v;
}

__global__ void __launch_bounds__(BLOCK) softmax_kernel(__half* y, const __half* x, int R, int C)
{
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    MaxSum acc = {-3.0e38f, 0.f};
    for (int i = threadIdx.x; i < C; i += BLOCK) {
        const float v = __half2float(xr[i]);
        const float m = fmaxf(acc.m, v);
        acc.s = acc.s * __expf(acc.m - m) + __expf(v - m);
        acc.m = m;
    }
    acc = warpCombine(acc);
    __shared__ MaxSum warps[BLOCK / 32];
    __shared__ MaxSum total;
    const int lane = threadIdx.x % 32;
    if (lane == 0)
        warps[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        MaxSum v = lane < BLOCK / 32 ? warps[lane] : MaxSum{-3.0e38f, 0.f};
        v = warpCombine(v);
        if (lane == 0)
            total = v;
    }
    __syncthreads();
    const float m = total.m;
    const float inv = 1.f / total.s;
    for (int i = threadIdx.x; i < C; i += BLOCK)
        yr[i] = __float2half(__expf(__half2float(xr[i]) - m) * inv);
}
