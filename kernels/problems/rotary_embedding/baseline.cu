// Naive baseline: one thread per output element, scalar loads; each element of a rotated pair re-reads its partner.
#include <cuda_bf16.h>
// @kl:launch rotary_embedding_baseline grid=(ceil_div(T * (HQ + 2 * HKV) * D, 256)) block=(256) smem=0 args=(q, k, v, qkv, positions, cos_sin_cache, T)
extern "C" __global__ void rotary_embedding_baseline(__nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v,
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
    const float a = __bfloat162float(row[h * D + i]), b = __bfloat162float(row[h * D + HALF + i]);
    const float c = cs[i], s = cs[HALF + i];
    const float r = d < HALF ? a * c - b * s : b * c + a * s;
    __nv_bfloat16* o = h < HQ ? q + (t * HQ + h) * D : k + (t * HKV + h - HQ) * D;
    o[d] = __float2bfloat16_rn(r);
}
