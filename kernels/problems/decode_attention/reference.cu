// Trusted reference: one block per (sequence, query head), one thread per head dimension, the tokens in order
// with an online softmax; math in KL_ACC.
#include <cuda_bf16.h>
#ifndef KL_ACC
#define KL_ACC float
#endif
// @kl:launch decode_attention_reference grid=(B, HQ) block=(D) smem=0 args=(out, q, k_cache, v_cache, block_table, seq_lens, HQ, PS, MAXP, HKV, scale)
extern "C" __global__ void decode_attention_reference(__nv_bfloat16* out, const __nv_bfloat16* q,
    const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* block_table, const int* seq_lens, int HQ,
    int PS, int MAXP, int HKV, float scale)
{
    constexpr int D = 128;
    const int b = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const int kvh = h / (HQ / HKV);
    __shared__ KL_ACC partial[D / 32];
    const KL_ACC qd = (KL_ACC)__bfloat162float(q[((long long)b * HQ + h) * D + d]);
    KL_ACC m = (KL_ACC)-1e30, l = 0, acc = 0;
    const int len = seq_lens[b];
    for (int t = 0; t < len; ++t) {
        const long long page = block_table[(long long)b * MAXP + t / PS];
        const long long at = ((page * PS + t % PS) * HKV + kvh) * D + d;
        KL_ACC s = qd * (KL_ACC)__bfloat162float(k_cache[at]);
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if ((d & 31) == 0)
            partial[d >> 5] = s;
        __syncthreads();
        s = 0;
        for (int w = 0; w < D / 32; ++w)
            s += partial[w];
        s *= (KL_ACC)scale;
        __syncthreads();
        const KL_ACC mNew = s > m ? s : m;
        const KL_ACC correction = exp(m - mNew);
        const KL_ACC p = exp(s - mNew);
        l = l * correction + p;
        acc = acc * correction + p * (KL_ACC)__bfloat162float(v_cache[at]);
        m = mNew;
    }
    out[((long long)b * HQ + h) * D + d] = __float2bfloat16_rn((float)(acc / l));
}
