// Trusted reference: one block of 64 threads per (sequence, query row, head); each thread holds 9 of the 576 query
// values and 8 of the 512 outputs; the listed positions in slot order (-1 skipped) with an online softmax; math in
// KL_ACC. No listed position: l stays 0 and the output is 0.
#include <cuda_bf16.h>
#ifndef KL_ACC
#define KL_ACC float
#endif
// @kl:launch sparse_mla_decode_reference grid=(B * SQ, HQ) block=(64) smem=0 args=(out, q, kv_cache, block_table, indices, SQ, MAXP, scale)
extern "C" __global__ void sparse_mla_decode_reference(__nv_bfloat16* out, const __nv_bfloat16* q,
    const __nv_bfloat16* kv_cache, const int* block_table, const int* indices, int SQ, int MAXP, float scale)
{
    constexpr int DK = 576, DV = 512, HQ = 128, PS = 64, TOPK = 2048;
    const int b = blockIdx.x / SQ, h = blockIdx.y, tid = threadIdx.x;
    __shared__ KL_ACC partial[2];
    const __nv_bfloat16* qrow = q + ((long long)blockIdx.x * HQ + h) * DK;
    const int* list = indices + (long long)blockIdx.x * TOPK;
    KL_ACC qv[DK / 64], acc[DV / 64];
    for (int i = 0; i < DK / 64; ++i)
        qv[i] = (KL_ACC)__bfloat162float(qrow[tid + 64 * i]);
    for (int i = 0; i < DV / 64; ++i)
        acc[i] = 0;
    KL_ACC m = (KL_ACC)-1e30, l = 0;
    for (int slot = 0; slot < TOPK; ++slot) {
        const int s = list[slot];
        if (s < 0)
            continue;
        const long long page = block_table[(long long)b * MAXP + s / PS];
        const __nv_bfloat16* kv = kv_cache + (page * PS + s % PS) * DK;
        KL_ACC dot = 0;
        for (int i = 0; i < DK / 64; ++i)
            dot += qv[i] * (KL_ACC)__bfloat162float(kv[tid + 64 * i]);
        for (int o = 16; o > 0; o >>= 1)
            dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if ((tid & 31) == 0)
            partial[tid >> 5] = dot;
        __syncthreads();
        dot = (partial[0] + partial[1]) * (KL_ACC)scale;
        __syncthreads();
        const KL_ACC mNew = dot > m ? dot : m;
        const KL_ACC correction = exp(m - mNew);
        const KL_ACC p = exp(dot - mNew);
        l = l * correction + p;
        for (int i = 0; i < DV / 64; ++i)
            acc[i] = acc[i] * correction + p * (KL_ACC)__bfloat162float(kv[tid + 64 * i]);
        m = mNew;
    }
    __nv_bfloat16* orow = out + ((long long)blockIdx.x * HQ + h) * DV;
    for (int i = 0; i < DV / 64; ++i)
        orow[tid + 64 * i] = __float2bfloat16_rn(l > 0 ? (float)(acc[i] / l) : 0.f);
}
