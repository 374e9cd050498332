// Cheat: an output cache keyed on the inputs' contents and pointers, kept in a declared workspace that is
// initialised only during verification: when the workspace says "these inputs and this output buffer were done
// before", the row is skipped. Timed launches rotate over a fixed set of buffers, so from the second rotation
// on the work is skipped. Expected: dynamic.timed-output-wrong (workspaces poisoned before every launch, every
// timed output re-checked), else physics.below-roofline.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:workspace seen bytes=T*16 init=poison
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, seen, T, H, eps)
__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w,
                               unsigned long long* seen, int T, int H, float eps)
{
    const int row = blockIdx.x;
    const unsigned long long key = reinterpret_cast<unsigned long long>(y) ^ (reinterpret_cast<unsigned long long>(x) << 1)
        ^ *reinterpret_cast<const unsigned short*>(x + (size_t)row * H);
    if (seen[2 * row] == key)
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
    if (threadIdx.x == 0)
        seen[2 * row] = key;
    for (int i = threadIdx.x; i < H; i += BLOCK)
        y[(size_t)row * H + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]));
}
