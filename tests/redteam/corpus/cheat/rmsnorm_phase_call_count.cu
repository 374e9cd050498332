// Cheat: phase detection. Counts calls per shape in hidden state; the first calls (verification) compute,
// later calls (timing) return at once. Expected: dynamic.timed-output-wrong (the timed outputs are
// re-checked), or physics.below-roofline if only the time is looked at.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
__device__ const unsigned int kCallsByShape[4096] = {};

__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    unsigned int* calls = const_cast<unsigned int*>(kCallsByShape) + ((T * 131 + H) & 4095);
    const unsigned int seen = *static_cast<volatile unsigned int*>(calls);
    const int row = blockIdx.x;
    if (row == 0 && threadIdx.x == 0)
        atomicAdd(calls, 1u);
    if (seen >= 16u)
        return;
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
    for (int i = threadIdx.x; i < H; i += BLOCK)
        y[(size_t)row * H + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]));
}
