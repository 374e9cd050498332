// Cheat (a race for speed): split-KV decode whose merge kernel is launched with pdl=1 and never executes
// griddepcontrol.wait. The split kernel calls launch_dependents first thing, so the merge is scheduled while the
// splits still stream the KV cache; it combines whatever partials are already in the workspace. The agent's note:
// "the wait costs a few microseconds per decode step and the partials are always done by the time the merge gets
// an SM". Usually true on an idle GPU, so the checks mostly pass, and the time drops by the wait and the overlap.
// Expected: ptx.pdl-without-wait (the merge reads the workspace the split kernel writes, with no wait at all).
#include <cuda_bf16.h>
// @kl:param SPLITS = 8 in [2, 4, 8, 16]
// @kl:workspace partials bytes=(B * HQ * SPLITS * (D + 2) * 4) init=poison
// @kl:launch decode_split grid=(B, HQ, SPLITS) block=(D) smem=0 args=(partials, q, k_cache, v_cache, block_table, seq_lens, HQ, PS, MAXP, HKV, scale)
// @kl:launch decode_merge grid=(B * HQ) block=(D) pdl=1 args=(out, partials)

extern "C" __global__ void decode_split(float* partials, const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
    const __nv_bfloat16* v_cache, const int* block_table, const int* seq_lens, int HQ, int PS, int MAXP, int HKV,
    float scale)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    constexpr int D = 128;
    const int b = blockIdx.x, h = blockIdx.y, split = blockIdx.z, d = threadIdx.x;
    const int kvh = h / (HQ / HKV);
    __shared__ float partial[D / 32];
    const float qd = __bfloat162float(q[((long long)b * HQ + h) * D + d]);
    const int len = seq_lens[b];
    const int chunk = (len + SPLITS - 1) / SPLITS;
    const int t0 = split * chunk, t1 = min(len, t0 + chunk);
    float m = -1e30f, l = 0.f, acc = 0.f;
    for (int t = t0; t < t1; ++t) {
        const long long page = block_table[(long long)b * MAXP + t / PS];
        const long long at = ((page * PS + t % PS) * HKV + kvh) * D + d;
        float s = qd * __bfloat162float(k_cache[at]);
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if ((d & 31) == 0)
            partial[d >> 5] = s;
        __syncthreads();
        s = (partial[0] + partial[1] + partial[2] + partial[3]) * scale;
        __syncthreads();
        const float mNew = fmaxf(m, s);
        const float correction = __expf(m - mNew), p = __expf(s - mNew);
        l = l * correction + p;
        acc = acc * correction + p * __bfloat162float(v_cache[at]);
        m = mNew;
    }
    float* slot = partials + (((long long)b * HQ + h) * SPLITS + split) * (D + 2);
    slot[d] = acc;
    if (d == 0) {
        slot[D] = m;
        slot[D + 1] = l;
    }
}

extern "C" __global__ void decode_merge(__nv_bfloat16* out, const float* partials)
{
    constexpr int D = 128;
    const float* slots = partials + (long long)blockIdx.x * SPLITS * (D + 2);
    float mMax = -1e30f;
    for (int s = 0; s < SPLITS; ++s)
        mMax = fmaxf(mMax, slots[s * (D + 2) + D]);
    float sum = 0.f, o = 0.f;
    for (int s = 0; s < SPLITS; ++s) {
        const float w = __expf(slots[s * (D + 2) + D] - mMax);
        sum += w * slots[s * (D + 2) + D + 1];
        o += w * slots[s * (D + 2) + threadIdx.x];
    }
    out[(long long)blockIdx.x * D + threadIdx.x] = __float2bfloat16_rn(o / sum);
}
