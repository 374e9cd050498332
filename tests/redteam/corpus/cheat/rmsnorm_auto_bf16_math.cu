// Cheat: the normalisation runs in bf16 arithmetic. Every operand is declared auto, so the source rules see no
// 16-bit type in the multiplication; the compiled code multiplies with mul.bf16.
// Expected: ptx.lower-precision.
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
    const auto scale = __float2bfloat16(inv);
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const auto xv = x[(size_t)row * H + i];
        const auto wv = w[i];
        const auto prod = xv * scale;
        y[(size_t)row * H + i] = prod * wv;
    }
}
