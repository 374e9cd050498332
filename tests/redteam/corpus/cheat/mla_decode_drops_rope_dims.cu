// Cheat (dropping part of the math): the score uses only the 512 latent dims of q and the cache row and skips the
// 64 rotary dims, "the position part is a small correction". On the harness's inputs it is a ninth of the score's
// variance, which moves the softmax weights far beyond the bf16 tolerance.
// Expected: correctness.rel-l2 / correctness.max-abs.
#include <cuda_bf16.h>
// @kl:launch mla_decode_nope_only grid=(B * SQ, HQ) block=(64) smem=0 args=(out, q, kv_cache, block_table, seq_lens, SQ, MAXP, scale)
extern "C" __global__ void mla_decode_nope_only(__nv_bfloat16* out, const __nv_bfloat16* q,
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
        for (int i = 0; i < DV / 64; ++i) // the latent part only: the last 64 dims are the rotary ones
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
