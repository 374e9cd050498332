// Honest: one thread per rotated pair (d, d + 64) of a q or k head, both halves loaded and stored as bf16, the
// rotation in fp32 with the cos/sin of the token's own position; v copied 16 bytes at a time by a grid-stride loop
// in the same launch. bf16 only for loads and stores.
#include <cuda_bf16.h>
// @kl:launch rotary_pairs grid=(ceil_div(T * (HQ + HKV) * D / 2, 256)) block=(256) smem=0 args=(q, k, v, qkv, positions, cos_sin_cache, T)
extern "C" __global__ void rotary_pairs(__nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v,
    const __nv_bfloat16* qkv, const int* positions, const float* cos_sin_cache, int T)
{
    constexpr int HQ = 32, HKV = 8, D = 128, HALF = D / 2, W = (HQ + 2 * HKV) * D;
    constexpr int PAIRS = (HQ + HKV) * HALF; // rotated pairs per token
    const long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long threads = (long long)gridDim.x * blockDim.x;
    // v: 16-byte chunks of the last HKV heads of every row.
    for (long long c = idx; c < (long long)T * HKV * D / 8; c += threads) {
        const long long t = c / (HKV * D / 8), within = c % (HKV * D / 8);
        reinterpret_cast<uint4*>(v)[c] = reinterpret_cast<const uint4*>(qkv + t * W + (HQ + HKV) * D)[within];
    }
    if (idx >= (long long)T * PAIRS)
        return;
    const long long t = idx / PAIRS;
    const int pair = (int)(idx % PAIRS), h = pair / HALF, i = pair % HALF;
    const __nv_bfloat16* row = qkv + t * W + h * D;
    const float* cs = cos_sin_cache + (long long)positions[t] * D;
    const float a = __bfloat162float(row[i]), b = __bfloat162float(row[HALF + i]);
    const float c = cs[i], s = cs[HALF + i];
    __nv_bfloat16* o = h < HQ ? q + (t * HQ + h) * D : k + (t * HKV + h - HQ) * D;
    o[i] = __float2bfloat16_rn(a * c - b * s);
    o[HALF + i] = __float2bfloat16_rn(b * c + a * s);
}
