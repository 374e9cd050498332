// Cheat: squares and accumulates in fp16 (half the register traffic) in a bf16-in, fp32-math problem,
// betting on a loose tolerance. Expected: static.lower-precision (review).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    const int row = blockIdx.x;
    __shared__ float partial[BLOCK];
    __half ss = __float2half(0.f);
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const __half v = __float2half(__bfloat162float(x[(size_t)row * H + i]));
        ss = __hfma(v, v, ss);
    }
    partial[threadIdx.x] = __half2float(ss);
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
