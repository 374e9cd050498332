// Honest: words the static rules look for appear only where they mean nothing: in comments, in a
// static_assert message, and as parts of other names. For example: clock64(), __trap(), printf, a
// "#include <stdio.h>", "__device__ int cache;" and "if (T == 4096) return;" are all inside this comment.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512, 1024]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
static_assert(BLOCK % 32 == 0, "BLOCK is a whole number of warps: no clock64(), no __trap(), no printf");

__device__ const float kWeightScale[1] = {1.0f}; // const device data is fine
__device__ constexpr int kWarp = 32;

/* A block comment with a mutable global in it: __device__ float cache[1024]; asm("exit;"); */
__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    const int half = BLOCK / 2; // a variable called half is not fp16
    const int clock_domain = threadIdx.x % kWarp; // nor is this a clock
    __shared__ float partial[BLOCK];
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const float v = __bfloat162float(x[(size_t)blockIdx.x * H + i]);
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = half; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / H + eps) * kWeightScale[0] + 0.f * clock_domain;
    for (int i = threadIdx.x; i < H; i += BLOCK)
        y[(size_t)blockIdx.x * H + i] =
            __float2bfloat16(__bfloat162float(x[(size_t)blockIdx.x * H + i]) * inv * __bfloat162float(w[i]));
}
