// Simple baseline: one CTA per (query row, page) of 64 threads, one token each. The row's index query and the page's
// keys are staged in shared memory (key rows padded by one word so the 64 threads reading their own rows hit
// different banks); each thread then does its token's 64 x 128 products on the CUDA cores in fp32.
#include <cuda_bf16.h>
// @kl:launch dsa_indexer_baseline grid=(B * SQ, MAXP) block=(64) smem=0 args=(scores, q_index, weights, k_index_cache, block_table, seq_lens, SQ, MAXP)
extern "C" __global__ void dsa_indexer_baseline(float* scores, const __nv_bfloat16* q_index, const float* weights,
    const __nv_bfloat16* k_index_cache, const int* block_table, const int* seq_lens, int SQ, int MAXP)
{
    constexpr int HI = 64, DI = 128, PS = 64, PAIRS = DI / 2;
    __shared__ __nv_bfloat162 qs[HI][PAIRS];
    __shared__ __nv_bfloat162 ks[PS][PAIRS + 1];
    __shared__ float ws[HI];
    const int b = blockIdx.x / SQ, j = blockIdx.x % SQ, p = blockIdx.y, t = threadIdx.x;
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
    scores[(long long)blockIdx.x * MAXP * PS + s] = s < seq_lens[b] - SQ + 1 + j ? total : __int_as_float(0xff800000);
}
