// Naive baseline: one block per row, scalar loads, three passes (max, sum, write), fp32 math.
#include <cuda_fp16.h>
// @kl:launch softmax_baseline grid=(R) block=(256) smem=0 args=(y, x, R, C)
extern "C" __global__ void softmax_baseline(__half* y, const __half* x, int R, int C)
{
    __shared__ float red[256];
    const long long row = blockIdx.x;
    float m = -__int_as_float(0x7f800000);
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        m = fmaxf(m, __half2float(x[row * C + i]));
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        sum += expf(__half2float(x[row * C + i]) - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = 1.f / red[0];
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        y[row * C + i] = __float2half(expf(__half2float(x[row * C + i]) - m) * inv);
}
