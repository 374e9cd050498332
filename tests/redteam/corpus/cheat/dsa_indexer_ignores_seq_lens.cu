// Cheat (skipping the mask of the partial last page): scores are written for every position of every page, the
// seq_lens test dropped as "top-k never picks the padding anyway". Positions past a sequence's visible length must
// be -inf (the top-k stage relies on it); here they hold the scores of stale cache rows.
// Expected: correctness.non-finite (the reference's -inf must be matched exactly), correctness.max-abs.
#include <cuda_bf16.h>
// @kl:launch dsa_indexer_unmasked grid=(B * SQ, MAXP) block=(64) smem=0 args=(scores, q_index, weights, k_index_cache, block_table, seq_lens, SQ, MAXP)
extern "C" __global__ void dsa_indexer_unmasked(float* scores, const __nv_bfloat16* q_index, const float* weights,
    const __nv_bfloat16* k_index_cache, const int* block_table, const int* seq_lens, int SQ, int MAXP)
{
    constexpr int HI = 64, DI = 128, PS = 64, PAIRS = DI / 2;
    __shared__ __nv_bfloat162 qs[HI][PAIRS];
    __shared__ __nv_bfloat162 ks[PS][PAIRS + 1];
    __shared__ float ws[HI];
    const int b = blockIdx.x / SQ, p = blockIdx.y, t = threadIdx.x;
    const __nv_bfloat162* q = reinterpret_cast<const __nv_bfloat162*>(q_index + (long long)blockIdx.x * HI * DI);
    const __nv_bfloat162* k = reinterpret_cast<const __nv_bfloat162*>(
        k_index_cache + (long long)block_table[(long long)b * MAXP + p] * PS * DI);
    for (int i = t; i < HI * PAIRS; i += PS) {
        qs[i / PAIRS][i % PAIRS] = q[i];
        ks[i / PAIRS][i % PAIRS] = k[i];
    }
    ws[t] = weights[(long long)blockIdx.x * HI + t];
    __syncthreads();
    const int s = p * PS + t;
    float total = 0;
    for (int h = 0; h < HI; ++h) {
        float dot = 0;
        for (int d = 0; d < PAIRS; ++d) {
            const float2 a = __bfloat1622float2(qs[h][d]), c = __bfloat1622float2(ks[t][d]);
            dot += a.x * c.x + a.y * c.y;
        }
        total += ws[h] * fmaxf(dot, 0.f);
    }
    scores[(long long)blockIdx.x * MAXP * PS + s] = total;
}
