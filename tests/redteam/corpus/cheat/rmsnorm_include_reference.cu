// Cheat: pulls in the trusted reference (and its buffers) instead of writing a kernel.
// Expected: static.include.
#include <cuda_bf16.h>
#include "../reference.cu"
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    reference_rmsnorm_row(y, x, w, blockIdx.x, H, eps);
}
