// Trusted reference: one block per row; max in fp32, sum of exp in double, three passes.
#include <cuda_fp16.h>
// @kl:launch softmax_reference grid=(R) block=(256) smem=0 args=(y, x, R, C)
extern "C" __global__ void softmax_reference(__half* y, const __half* x, int R, int C)
{
    __shared__ float mx[256];
    __shared__ double sm[256];
    const long long row = blockIdx.x;
    const __half* xr = x + row * C;
    float m = -__int_as_float(0x7f800000);
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        m = fmaxf(m, __half2float(xr[i]));
    mx[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            mx[threadIdx.x] = fmaxf(mx[threadIdx.x], mx[threadIdx.x + s]);
        __syncthreads();
    }
    const double rowMax = mx[0];
    double sum = 0;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        sum += exp((double)__half2float(xr[i]) - rowMax);
    sm[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            sm[threadIdx.x] += sm[threadIdx.x + s];
        __syncthreads();
    }
    const double total = sm[0];
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        y[row * C + i] = __float2half_rn((float)(exp((double)__half2float(xr[i]) - rowMax) / total));
}
