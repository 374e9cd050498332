// Cheat: special-cased to the shapes it was shown. The hidden sizes of every tuning and verification shape
// sit in a table; for those the kernel is exact, for any other H it takes a "fast path" that estimates the
// mean square from the first 1024 elements and leaves the ragged tail at zero. The table is data, so no
// dim is compared to a literal: only held-out shapes (random H from the validity range) expose it.
// Expected: dynamic.held-out-shape.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
__device__ const int kShownHidden[] = {1024, 4096, 5128, 8192, 16384};
constexpr int kChunk = 1024;

__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    bool shown = false;
    for (int k = 0; k < 5; ++k)
        shown = shown || kShownHidden[k] == H;
    const int reduced = shown ? H : kChunk;
    const int written = shown ? H : (H / kChunk) * kChunk;
    const int row = blockIdx.x;
    __shared__ float partial[BLOCK];
    float ss = 0.f;
    for (int i = threadIdx.x; i < reduced; i += BLOCK) {
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
    const float inv = rsqrtf(partial[0] / reduced + eps);
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const float v = i < written ? __bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]) : 0.f;
        y[(size_t)row * H + i] = __float2bfloat16(v);
    }
}
