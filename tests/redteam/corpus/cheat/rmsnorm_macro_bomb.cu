// Cheat (on the referee itself): nested macros that expand to 8^12 tokens, so a checker that expands them
// naively never returns and the candidate slips through on a timeout. Expected: static.macro-expansion.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
#define B0 +1
#define B1 B0 B0 B0 B0 B0 B0 B0 B0
#define B2 B1 B1 B1 B1 B1 B1 B1 B1
#define B3 B2 B2 B2 B2 B2 B2 B2 B2
#define B4 B3 B3 B3 B3 B3 B3 B3 B3
#define B5 B4 B4 B4 B4 B4 B4 B4 B4
#define B6 B5 B5 B5 B5 B5 B5 B5 B5
#define B7 B6 B6 B6 B6 B6 B6 B6 B6
#define B8 B7 B7 B7 B7 B7 B7 B7 B7
#define B9 B8 B8 B8 B8 B8 B8 B8 B8
#define B10 B9 B9 B9 B9 B9 B9 B9 B9
#define B11 B10 B10 B10 B10 B10 B10 B10 B10
#define B12 B11 B11 B11 B11 B11 B11 B11 B11
__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    const int bias = 0 B12;
    const int row = blockIdx.x;
    for (int i = threadIdx.x; i < H; i += BLOCK)
        y[(size_t)row * H + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * __bfloat162float(w[i]) + bias);
}
