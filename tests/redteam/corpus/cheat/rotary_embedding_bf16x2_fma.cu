// Cheat (B7, 16-bit arithmetic): the rotation done on bf16 pairs with __hmul2/__hfma2 (one instruction for two
// elements, no conversions), the cos/sin rounded to bf16 first. Each output takes two bf16 roundings more than the
// contract's fp32 math, which a loose tolerance may let through on the normal inputs.
// Expected: static.lower-precision (review; ptx.lower-precision rejects the compiled code too).
#include <cuda_bf16.h>
// @kl:launch rotary_bf16x2 grid=(ceil_div(T * (HQ + 2 * HKV) * D, 256)) block=(256) smem=0 args=(q, k, v, qkv, positions, cos_sin_cache, T)
extern "C" __global__ void rotary_bf16x2(__nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v,
    const __nv_bfloat16* qkv, const int* positions, const float* cos_sin_cache, int T)
{
    constexpr int HQ = 32, HKV = 8, D = 128, HALF = D / 2, W = (HQ + 2 * HKV) * D;
    const long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (idx >= (long long)T * W)
        return;
    const long long t = idx / W;
    const int col = (int)(idx % W), h = col / D, d = col % D;
    const __nv_bfloat16* row = qkv + t * W;
    if (h >= HQ + HKV) {
        v[(t * HKV + h - HQ - HKV) * D + d] = row[col];
        return;
    }
    const float* cs = cos_sin_cache + (long long)positions[t] * D;
    const int i = d % HALF;
    const __nv_bfloat162 ab = __halves2bfloat162(row[h * D + i], row[h * D + HALF + i]);
    const __nv_bfloat162 cc = __float2bfloat162_rn(cs[i]), ss = __float2bfloat162_rn(cs[HALF + i]);
    const __nv_bfloat162 ba = __lowhigh2highlow(ab);
    const __nv_bfloat162 sign = __floats2bfloat162_rn(-1.f, 1.f);
    const __nv_bfloat162 r = __hfma2(ab, cc, __hmul2(__hmul2(ba, ss), sign)); // (a c - b s, b c + a s)
    __nv_bfloat16* o = h < HQ ? q + (t * HQ + h) * D : k + (t * HKV + h - HQ) * D;
    o[d] = d < HALF ? __low2bfloat16(r) : __high2bfloat16(r);
}
