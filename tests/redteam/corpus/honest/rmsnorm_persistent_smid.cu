// Honest: a persistent kernel. A fixed grid of blocks strides over all rows; each block reads %smid once to
// stagger where it starts, so blocks on the same SM do not walk the same rows in lockstep. %smid says where a
// block runs, not when or in which launch: every row is still normalised exactly once per launch.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:param BLOCKS = 528 in [264, 528, 1056]
// @kl:launch rmsnorm_kernel grid=(BLOCKS) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    unsigned int sm;
    asm("mov.u32 %0, %%smid;" : "=r"(sm));
    __shared__ float partial[BLOCK];
    // Block b handles rows b, b + BLOCKS, ...; the %smid stagger only rotates the order it visits them in.
    const int mine = (T - (int)blockIdx.x + BLOCKS - 1) / BLOCKS;
    for (int k = 0; k < mine; ++k) {
        const int row = (int)blockIdx.x + ((k + (int)(sm % 4)) % mine) * BLOCKS;
        float ss = 0.f;
        for (int i = threadIdx.x; i < H; i += BLOCK) {
            const float v = __bfloat162float(x[(size_t)row * H + i]);
            ss += v * v;
        }
        partial[threadIdx.x] = ss;
        __syncthreads();
        for (int s = BLOCK / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s)
                partial[threadIdx.x] += partial[threadIdx.x + s];
            __syncthreads();
        }
        const float inv = rsqrtf(partial[0] / H + eps);
        __syncthreads();
        for (int i = threadIdx.x; i < H; i += BLOCK)
            y[(size_t)row * H + i]
                = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]));
    }
}
