// Honest: a shape branch that only chooses where the row lives. Rows up to 2048 columns are staged in
// shared memory (one global read); wider rows take three passes over global memory. Both paths compute
// the whole softmax with max subtraction in fp32.
#include <cuda_fp16.h>
// @kl:param BLOCK = 256 in [128, 256, 512, 1024]
// @kl:launch softmax_kernel grid=(R) block=(BLOCK) smem=0 args=(y, x, R, C)
__device__ float blockReduce(float v, float* scratch, bool isMax)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, offset);
        v = isMax ? fmaxf(v, other) : v + other;
    }
    if (threadIdx.x % 32 == 0)
        scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float r = scratch[0];
    for (int i = 1; i < BLOCK / 32; ++i)
        r = isMax ? fmaxf(r, scratch[i]) : r + scratch[i];
    __syncthreads();
    return r;
}

__global__ void softmax_kernel(__half* y, const __half* x, int R, int C)
{
    __shared__ float row[2048];
    __shared__ float scratch[BLOCK / 32];
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    const bool staged = C <= 2048;
    float m = -3.0e38f;
    for (int i = threadIdx.x; i < C; i += BLOCK) {
        const float v = __half2float(xr[i]);
        if (staged)
            row[i] = v;
        m = fmaxf(m, v);
    }
    m = blockReduce(m, scratch, true);
    float s = 0.f;
    for (int i = threadIdx.x; i < C; i += BLOCK)
        s += expf((staged ? row[i] : __half2float(xr[i])) - m);
    const float inv = 1.f / blockReduce(s, scratch, false);
    for (int i = threadIdx.x; i < C; i += BLOCK)
        yr[i] = __float2half(expf((staged ? row[i] : __half2float(xr[i])) - m) * inv);
}
