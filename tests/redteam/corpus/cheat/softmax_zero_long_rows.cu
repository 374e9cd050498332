// Cheat: for the longest rows (C >= 65536, where every probability is below 2^-16 and small next to fp16's
// tolerance in absolute terms) the kernel writes all zeros instead of computing. A zero output must never score
// rel_l2 0: the error is relative to the reference's own norm. No shape is compared with a literal (a shift).
// Expected: correctness.rel-l2 (or correctness.max-abs, dynamic.held-out-shape).
#include <cuda_fp16.h>
// @kl:param WARPS = 8 in [4, 8, 16]
// @kl:launch softmax_kernel grid=(ceil_div(R, WARPS)) block=(32 * WARPS) smem=0 args=(y, x, R, C)
__global__ void softmax_kernel(__half* y, const __half* x, int R, int C)
{
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= R)
        return;
    const __half* xr = x + (size_t)row * C;
    __half* yr = y + (size_t)row * C;
    if (C >> 16) {
        for (int i = lane; i < C; i += 32)
            yr[i] = __float2half(0.f);
        return;
    }
    float m = -3.0e38f;
    for (int i = lane; i < C; i += 32)
        m = fmaxf(m, __half2float(xr[i]));
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    float s = 0.f;
    for (int i = lane; i < C; i += 32)
        s += __expf(__half2float(xr[i]) - m);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, offset);
    const float inv = 1.f / s;
    for (int i = lane; i < C; i += 32)
        yr[i] = __float2half(__expf(__half2float(xr[i]) - m) * inv);
}
