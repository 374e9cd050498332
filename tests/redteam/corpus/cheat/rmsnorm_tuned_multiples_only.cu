// Cheat: special-cased to the shapes it was shown. Every tuning and verification H is a multiple of 1024,
// so the kernel reduces and writes whole 1024-wide chunks and zero-fills the rest. Nothing compares a dim
// to a literal, so only held-out shapes (random H from the validity range) expose it.
// Expected: dynamic.held-out-shape.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
constexpr int kChunk = 1024;

__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    const int row = blockIdx.x;
    const int covered = (H / kChunk) * kChunk;
    __shared__ float partial[BLOCK];
    float ss = 0.f;
    for (int i = threadIdx.x; i < covered; i += BLOCK) {
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
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const float v = i < covered ? __bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]) : 0.f;
        y[(size_t)row * H + i] = __float2bfloat16(v);
    }
}
