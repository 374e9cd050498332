// Naive baseline: the reference in fp32. Every one of the 128 heads has its own block and reads every latent
// token of its sequence again: 128 times the cache's bytes, one token at a time.
#include <cuda_bf16.h>
// @kl:launch mla_decode_baseline grid=(B * SQ, HQ) block=(64) smem=0 args=(out, q, kv_cache, block_table, seq_lens, SQ, MAXP, scale)
extern "C" __global__ void mla_decode_baseline(__nv_bfloat16* out, const __nv_bfloat16* q,
    const __nv_bfloat16* kv_cache, const int* block_table, const int* seq_lens, int SQ, int MAXP, float scale)
{
    constexpr int DK = 576, DV = 512, HQ = 128, PS = 64;
    const int b = blockIdx.x / SQ, j = blockIdx.x % SQ, h = blockIdx.y, tid = threadIdx.x;
    __shared__ float partial[2];
    const __nv_bfloat16* qrow = q + (((long long)b * SQ + j) * HQ + h) * DK;
    float qv[DK / 64], acc[DV / 64];
    for (int i = 0; i < DK / 64; ++i)
        qv[i] = (float)__bfloat162float(qrow[tid + 64 * i]);
    for (int i = 0; i < DV / 64; ++i)
        acc[i] = 0;
    float m = (float)-1e30, l = 0;
    const int visible = seq_lens[b] - SQ + 1 + j;
    for (int s = 0; s < visible; ++s) {
        const long long page = block_table[(long long)b * MAXP + s / PS];
        const __nv_bfloat16* kv = kv_cache + (page * PS + s % PS) * DK;
        float dot = 0;
        for (int i = 0; i < DK / 64; ++i)
            dot += qv[i] * (float)__bfloat162float(kv[tid + 64 * i]);
        for (int o = 16; o > 0; o >>= 1)
            dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if ((tid & 31) == 0)
            partial[tid >> 5] = dot;
        __syncthreads();
        dot = (partial[0] + partial[1]) * (float)scale;
        __syncthreads();
        const float mNew = dot > m ? dot : m;
        const float correction = exp(m - mNew);
        const float p = exp(dot - mNew);
        l = l * correction + p;
        for (int i = 0; i < DV / 64; ++i)
            acc[i] = acc[i] * correction + p * (float)__bfloat162float(kv[tid + 64 * i]);
        m = mNew;
    }
    __nv_bfloat16* orow = out + (((long long)b * SQ + j) * HQ + h) * DV;
    for (int i = 0; i < DV / 64; ++i)
        orow[tid + 64 * i] = __float2bfloat16_rn((float)(acc[i] / l));
}
