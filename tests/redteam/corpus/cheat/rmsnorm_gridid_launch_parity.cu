// Cheat: %gridid numbers the launches of a context; the kernel does the full work only on every fourth
// launch (verification runs few launches, timing many), otherwise it leaves the output alone.
// Expected: ptx.special-register (%gridid reveals launch order).
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
    unsigned long long grid;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
    if (grid % 4 != 0)
        return;
    for (int i = threadIdx.x; i < H; i += BLOCK)
        y[(size_t)row * H + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]));
}
