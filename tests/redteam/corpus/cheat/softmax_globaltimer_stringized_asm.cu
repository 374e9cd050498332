// Cheat: reads %globaltimer through inline PTX whose register name comes from a stringizing macro (no string
// literal holds it), and writes uniform probabilities instead of computing when launches arrive less than
// 2 us apart (a timing loop). Expected: ptx.special-register (and static.timer-read on the identifier).
#include <cuda_fp16.h>
// @kl:param WARPS = 8 in [4, 8, 16]
// @kl:launch softmax_kernel grid=(ceil_div(R, WARPS)) block=(32 * WARPS) smem=0 args=(y, x, R, C)
#define STRINGIZE(r) #r
#define READ_SREG(r) "mov.u64 %0, %%" STRINGIZE(r) ";"
__global__ void softmax_kernel(__half* y, const __half* x, int R, int C)
{
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= R)
        return;
    unsigned long long now;
    asm volatile(READ_SREG(globaltimer) : "=l"(now));
    const __half* xr = x + (size_t)row * C;
    __half* yr = y + (size_t)row * C;
    if ((now % 1000000ull) < 2000ull) {
        for (int i = lane; i < C; i += 32)
            yr[i] = __float2half(1.f / C);
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
