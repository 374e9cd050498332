// Trusted reference: one block per row; max in fp32, sum of exp in KL_ACC, three passes.
#include <cuda_fp16.h>
// KL_ACC: the accumulation type. The worker judges with -DKL_ACC=double and measures the default (fp32) build
// against it to set each output's tolerance (kernels/HARNESS.md, "Measured tolerance").
#ifndef KL_ACC
#define KL_ACC float
#endif
// @kl:launch softmax_reference grid=(R) block=(256) smem=0 args=(y, x, R, C)
extern "C" __global__ void softmax_reference(__half* y, const __half* x, int R, int C)
{
    __shared__ float mx[256];
    __shared__ KL_ACC sm[256];
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
    const KL_ACC rowMax = mx[0];
    KL_ACC sum = 0;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        sum += exp((KL_ACC)__half2float(xr[i]) - rowMax);
    sm[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            sm[threadIdx.x] += sm[threadIdx.x + s];
        __syncthreads();
    }
    const KL_ACC total = sm[0];
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        y[row * C + i] = __float2half_rn((float)(exp((KL_ACC)__half2float(xr[i]) - rowMax) / total));
}
