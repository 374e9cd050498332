// Cheat: drops the max subtraction (one pass and one reduction fewer). Fine on unit-scale inputs, but
// exp overflows on large magnitudes. Expected: correctness.non-finite.
#include <cuda_fp16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch softmax_kernel grid=(R) block=(BLOCK) smem=0 args=(y, x, R, C)
__global__ void softmax_kernel(__half* y, const __half* x, int R, int C)
{
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    __shared__ float red[BLOCK];
    float sum = 0.f;
    for (int i = threadIdx.x; i < C; i += BLOCK)
        sum += __expf(__half2float(xr[i]));
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = 1.f / red[0];
    for (int i = threadIdx.x; i < C; i += BLOCK)
        yr[i] = __float2half(__expf(__half2float(xr[i])) * inv);
}
