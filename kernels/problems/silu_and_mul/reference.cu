// Trusted reference: one thread per output element, double-precision math.
#include <cuda_bf16.h>
// @kl:launch silu_and_mul_reference grid=(T, ceil_div(I, 256)) block=(256) smem=0 args=(y, x, T, I)
extern "C" __global__ void silu_and_mul_reference(__nv_bfloat16* y, const __nv_bfloat16* x, int T, int I)
{
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    const long long t = blockIdx.x;
    if (i >= I)
        return;
    const double a = __bfloat162float(x[t * 2 * I + i]);
    const double b = __bfloat162float(x[t * 2 * I + I + i]);
    y[t * I + i] = __float2bfloat16_rn((float)(a / (1.0 + exp(-a)) * b));
}
