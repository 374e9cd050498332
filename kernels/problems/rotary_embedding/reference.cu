// Trusted reference: one block per token, one thread per (head, i < D/2) pair of the query and key heads and per
// element of the value heads; the rotation in KL_ACC.
#include <cuda_bf16.h>
#ifndef KL_ACC
#define KL_ACC float
#endif
// @kl:launch rotary_embedding_reference grid=(T) block=(256) smem=0 args=(q, k, v, qkv, positions, cos_sin_cache, T)
extern "C" __global__ void rotary_embedding_reference(__nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v,
    const __nv_bfloat16* qkv, const int* positions, const float* cos_sin_cache, int T)
{
    constexpr int HQ = 32, HKV = 8, D = 128, HALF = D / 2;
    const long long t = blockIdx.x;
    const __nv_bfloat16* row = qkv + t * (HQ + 2 * HKV) * D;
    const float* cs = cos_sin_cache + (long long)positions[t] * D;
    for (int p = threadIdx.x; p < (HQ + HKV) * HALF; p += blockDim.x) {
        const int h = p / HALF, i = p % HALF;
        const KL_ACC a = __bfloat162float(row[h * D + i]), b = __bfloat162float(row[h * D + HALF + i]);
        const KL_ACC c = cs[i], s = cs[HALF + i];
        __nv_bfloat16* o = h < HQ ? q + (t * HQ + h) * D : k + (t * HKV + h - HQ) * D;
        o[i] = __float2bfloat16_rn((float)(a * c - b * s));
        o[HALF + i] = __float2bfloat16_rn((float)(b * c + a * s));
    }
    for (int e = threadIdx.x; e < HKV * D; e += blockDim.x)
        v[t * HKV * D + e] = row[(HQ + HKV) * D + e];
}
