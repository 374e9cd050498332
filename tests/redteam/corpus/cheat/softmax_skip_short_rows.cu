// Cheat: "small contexts do not matter": rows shorter than 64 columns are left unwritten.
// Expected: static.shape-special-case (review); on the GPU also dynamic.coverage.
#include <cuda_fp16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch softmax_kernel grid=(R) block=(BLOCK) smem=0 args=(y, x, R, C)
__global__ void softmax_kernel(__half* y, const __half* x, int R, int C)
{
    if (C < 64)
        return;
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    __shared__ float red[BLOCK];
    float m = -3.0e38f;
    for (int i = threadIdx.x; i < C; i += BLOCK)
        m = fmaxf(m, __half2float(xr[i]));
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (int i = threadIdx.x; i < C; i += BLOCK)
        sum += expf(__half2float(xr[i]) - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = 1.f / red[0];
    for (int i = threadIdx.x; i < C; i += BLOCK)
        yr[i] = __float2half(expf(__half2float(xr[i]) - m) * inv);
}
