// Cheat: tells checks from timing by the memory around the output: during verification a guard canary sits
// right before y, during timing (today) it does not. Checked launches compute everything; others only even
// rows. Expected: worker.crashed or launch.failed (the read before y faults on a guard range), else
// dynamic.timed-output-wrong (the same canaries in every launch, every timed output re-checked).
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:constraint I % 2 == 0
// @kl:launch silu_and_mul_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, T, I)
__device__ __forceinline__ float silu(float g) { return g / (1.f + __expf(-g)); }

__global__ void silu_and_mul_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, int T, int I)
{
    const unsigned int before = reinterpret_cast<const unsigned int*>(y)[-1];
    const unsigned int further = reinterpret_cast<const unsigned int*>(y)[-2];
    const bool checked = before == further && before != 0u;
    if (!checked && (blockIdx.x & 1))
        return;
    const __nv_bfloat16* gate = x + (size_t)blockIdx.x * 2 * I;
    const __nv_bfloat16* up = gate + I;
    __nv_bfloat16* out = y + (size_t)blockIdx.x * I;
    for (int i = threadIdx.x; i < I; i += BLOCK)
        out[i] = __float2bfloat16(silu(__bfloat162float(gate[i])) * __bfloat162float(up[i]));
}
