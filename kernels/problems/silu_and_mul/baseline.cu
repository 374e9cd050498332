// Naive baseline: a flat grid over all outputs, one scalar element per thread, a division per element.
#include <cuda_bf16.h>
// @kl:launch silu_and_mul_baseline grid=(ceil_div(T * I, 256)) block=(256) smem=0 args=(y, x, T, I)
extern "C" __global__ void silu_and_mul_baseline(__nv_bfloat16* y, const __nv_bfloat16* x, int T, int I)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)T * I)
        return;
    const long long t = idx / I;
    const long long i = idx % I;
    const float a = __bfloat162float(x[t * 2 * I + i]);
    const float b = __bfloat162float(x[t * 2 * I + I + i]);
    y[idx] = __float2bfloat16(a / (1.f + expf(-a)) * b);
}
