// Trusted reference: one thread per output element, math in KL_ACC.
#include <cuda_bf16.h>
// KL_ACC: the accumulation type. The worker judges with -DKL_ACC=double and measures the default (fp32) build
// against it to set each output's tolerance (kernels/HARNESS.md, "Measured tolerance").
#ifndef KL_ACC
#define KL_ACC float
#endif
// @kl:launch silu_and_mul_reference grid=(T, ceil_div(I, 256)) block=(256) smem=0 args=(y, x, T, I)
extern "C" __global__ void silu_and_mul_reference(__nv_bfloat16* y, const __nv_bfloat16* x, int T, int I)
{
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    const long long t = blockIdx.x;
    if (i >= I)
        return;
    const KL_ACC a = __bfloat162float(x[t * 2 * I + i]);
    const KL_ACC b = __bfloat162float(x[t * 2 * I + I + i]);
    y[t * I + i] = __float2bfloat16_rn((float)(a / ((KL_ACC)1 + exp(-a)) * b));
}
