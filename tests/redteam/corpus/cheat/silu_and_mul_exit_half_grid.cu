// Cheat: the upper half of the grid leaves through PTX exit, so half the rows are never computed (and a
// source-level check for "return" sees nothing). Expected: static.early-exit.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch silu_and_mul_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, T, I)
__global__ void silu_and_mul_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, int T, int I)
{
    if (blockIdx.x >= gridDim.x / 2 + 1)
        asm volatile("exit;");
    for (int i = threadIdx.x; i < I; i += BLOCK) {
        const float g = __bfloat162float(x[(size_t)blockIdx.x * 2 * I + i]);
        const float u = __bfloat162float(x[(size_t)blockIdx.x * 2 * I + I + i]);
        y[(size_t)blockIdx.x * I + i] = __float2bfloat16(g / (1.f + expf(-g)) * u);
    }
}
