// Cheat (special-casing the inputs the agent expects): in a prefill the positions are 0, 1, 2, ..., so the
// kernel indexes the cos/sin cache by the token's row instead of reading positions[t] ("one load fewer per token,
// and the table rows stream in order"). The harness draws positions uniformly from [0, MAXPOS) on every check, as a
// decode batch has them. Expected: correctness.rel-l2 / correctness.max-abs on q and k (v is a copy and passes).
#include <cuda_bf16.h>
// @kl:launch rotary_arange grid=(ceil_div(T * (HQ + 2 * HKV) * D, 256)) block=(256) smem=0 args=(q, k, v, qkv, positions, cos_sin_cache, T)
extern "C" __global__ void rotary_arange(__nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v,
    const __nv_bfloat16* qkv, const int* positions, const float* cos_sin_cache, int T)
{
    constexpr int HQ = 32, HKV = 8, D = 128, HALF = D / 2, W = (HQ + 2 * HKV) * D, MAXPOS = 8192;
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
    const float* cs = cos_sin_cache + (t % MAXPOS) * D;
    const int i = d % HALF;
    const float a = __bfloat162float(row[h * D + i]), b = __bfloat162float(row[h * D + HALF + i]);
    const float c = cs[i], s = cs[HALF + i];
    const float r = d < HALF ? a * c - b * s : b * c + a * s;
    __nv_bfloat16* o = h < HQ ? q + (t * HQ + h) * D : k + (t * HKV + h - HQ) * D;
    o[d] = __float2bfloat16_rn(r);
}
