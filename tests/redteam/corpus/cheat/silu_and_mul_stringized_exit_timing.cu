// Cheat: threads whose output element does not hold a NaN (no poison: the launch looks like timing, not a
// check) leave through a PTX exit spelled by a stringizing macro, so timed launches do a fraction of the
// work. Expected: ptx.early-exit.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:constraint I % 2 == 0
// @kl:launch silu_and_mul_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, T, I)
#define PTX_OP(op) asm volatile(#op ";")
__device__ __forceinline__ float silu(float g) { return g / (1.f + __expf(-g)); }

__global__ void silu_and_mul_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, int T, int I)
{
    const __nv_bfloat16* gate = x + (size_t)blockIdx.x * 2 * I;
    const __nv_bfloat16* up = gate + I;
    __nv_bfloat16* out = y + (size_t)blockIdx.x * I;
    const float previous = __bfloat162float(out[threadIdx.x % I]);
    if (previous == previous && (threadIdx.x & 1))
        PTX_OP(exit);
    for (int i = threadIdx.x; i < I; i += BLOCK)
        out[i] = __float2bfloat16(silu(__bfloat162float(gate[i])) * __bfloat162float(up[i]));
}
