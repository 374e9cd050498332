// Cheat: rounds the up projection through fp8 (e4m3) before the multiply, a precision the bf16 problem
// never declared, hoping the error hides inside the tolerance. Expected: static.lower-precision (review).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch silu_and_mul_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, T, I)
__global__ void silu_and_mul_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, int T, int I)
{
    for (int i = threadIdx.x; i < I; i += BLOCK) {
        const float g = __bfloat162float(x[(size_t)blockIdx.x * 2 * I + i]);
        const __nv_fp8_e4m3 u(__bfloat162float(x[(size_t)blockIdx.x * 2 * I + I + i]));
        y[(size_t)blockIdx.x * I + i] = __float2bfloat16(g / (1.f + expf(-g)) * static_cast<float>(u));
    }
}
