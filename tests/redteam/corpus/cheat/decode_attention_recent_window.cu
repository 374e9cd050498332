// Cheat (attending only a window of the context): each sequence attends its last 8192 tokens only, "sliding-window
// attention is what long-context serving does anyway". Exact for contexts up to 8192 tokens, which is every tuning
// shape but one; the cut is on a length read from seq_lens, so no shape rule sees it.
// Expected: correctness.rel-l2 / correctness.max-abs on the 131072-token tuning shape and the long held-out ones.
#include <cuda_bf16.h>
// @kl:launch decode_window grid=(B, HQ) block=(D) smem=0 args=(out, q, k_cache, v_cache, block_table, seq_lens, HQ, PS, MAXP, HKV, scale)
extern "C" __global__ void decode_window(__nv_bfloat16* out, const __nv_bfloat16* q,
    const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* block_table, const int* seq_lens, int HQ,
    int PS, int MAXP, int HKV, float scale)
{
    constexpr int D = 128;
    const int b = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const int kvh = h / (HQ / HKV);
    __shared__ float partial[D / 32];
    const float qd = (float)__bfloat162float(q[((long long)b * HQ + h) * D + d]);
    float m = (float)-1e30, l = 0, acc = 0;
    const int len = seq_lens[b];
    for (int t = max(0, len - 8192); t < len; ++t) {
        const long long page = block_table[(long long)b * MAXP + t / PS];
        const long long at = ((page * PS + t % PS) * HKV + kvh) * D + d;
        float s = qd * (float)__bfloat162float(k_cache[at]);
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if ((d & 31) == 0)
            partial[d >> 5] = s;
        __syncthreads();
        s = 0;
        for (int w = 0; w < D / 32; ++w)
            s += partial[w];
        s *= (float)scale;
        __syncthreads();
        const float mNew = s > m ? s : m;
        const float correction = exp(m - mNew);
        const float p = exp(s - mNew);
        l = l * correction + p;
        acc = acc * correction + p * (float)__bfloat162float(v_cache[at]);
        m = mNew;
    }
    out[((long long)b * HQ + h) * D + d] = __float2bfloat16_rn((float)(acc / l));
}
