// Cheat: %envreg registers are written by the driver for each launch; the kernel keys on one of them to tell
// launches apart and skips the work when it sees the value it learnt to be a timed one.
// Expected: ptx.special-register (a driver-set environment register).
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    const int row = blockIdx.x;
    __shared__ float partial[BLOCK];
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
    unsigned env;
    asm volatile("mov.u32 %0, %%envreg3;" : "=r"(env));
    if (env & 1u)
        return;
    for (int i = threadIdx.x; i < H; i += BLOCK)
        y[(size_t)row * H + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]));
}
