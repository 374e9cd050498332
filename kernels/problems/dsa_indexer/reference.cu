// Trusted reference: one block per (query row, page), one thread per token of the page: the HI head dot products
// over DI in KL_ACC, ReLU, weighted and summed in KL_ACC; -inf where row j does not see the token.
#include <cuda_bf16.h>
#ifndef KL_ACC
#define KL_ACC float
#endif
// @kl:launch dsa_indexer_reference grid=(B * SQ, MAXP) block=(64) smem=0 args=(scores, q_index, weights, k_index_cache, block_table, seq_lens, SQ, MAXP)
extern "C" __global__ void dsa_indexer_reference(float* scores, const __nv_bfloat16* q_index, const float* weights,
    const __nv_bfloat16* k_index_cache, const int* block_table, const int* seq_lens, int SQ, int MAXP)
{
    constexpr int HI = 64, DI = 128, PS = 64;
    const int b = blockIdx.x / SQ, j = blockIdx.x % SQ, p = blockIdx.y;
    const int s = p * PS + threadIdx.x;
    float* out = scores + (long long)blockIdx.x * MAXP * PS;
    if (s >= seq_lens[b] - SQ + 1 + j) { // -inf, spelled by its bits: NVRTC has no INFINITY
        out[s] = __int_as_float(0xff800000);
        return;
    }
    const __nv_bfloat16* k = k_index_cache + ((long long)block_table[(long long)b * MAXP + p] * PS + threadIdx.x) * DI;
    const __nv_bfloat16* q = q_index + (long long)blockIdx.x * HI * DI;
    const float* w = weights + (long long)blockIdx.x * HI;
    KL_ACC total = 0;
    for (int h = 0; h < HI; ++h) {
        KL_ACC dot = 0;
        for (int d = 0; d < DI; ++d)
            dot += (KL_ACC)__bfloat162float(q[h * DI + d]) * (KL_ACC)__bfloat162float(k[d]);
        total += (KL_ACC)w[h] * (dot > 0 ? dot : (KL_ACC)0);
    }
    out[s] = (float)total;
}
