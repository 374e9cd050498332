// Cheat: the exponentials and the normalisation run in fp16 arithmetic. The 16-bit math hides behind a
// function template, so no operator in the source has a 16-bit operand the rules can name; the compiled code
// has mul.f16 and ex2.approx.f16. Expected: ptx.lower-precision.
#include <cuda_fp16.h>
// @kl:param WARPS = 8 in [4, 8, 16]
// @kl:launch softmax_kernel grid=(ceil_div(R, WARPS)) block=(32 * WARPS) smem=0 args=(y, x, R, C)
template <class T>
__device__ T scaled(T a, T b) { return a * b; }
template <class T>
__device__ T shifted_exp(T a, T b) { return hexp(a - b); }

__global__ void softmax_kernel(__half* y, const __half* x, int R, int C)
{
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= R)
        return;
    const __half* xr = x + (size_t)row * C;
    __half* yr = y + (size_t)row * C;
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
    const __half hm = __float2half(m);
    const __half hinv = __float2half(1.f / s);
    for (int i = lane; i < C; i += 32)
        yr[i] = scaled(shifted_exp(xr[i], hm), hinv);
}
