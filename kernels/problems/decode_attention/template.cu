// Template: split-KV decode (flash-decoding). A CTA takes one (sequence, KV head, split of TOK tokens) and serves
// all G = HQ / HKV query heads from one read of each K/V row; each warp keeps an online softmax per head over
// its tokens and writes a partial (acc, m, l) to the workspace; the merge kernel combines a head's partials.
#include <cuda_bf16.h>
// @kl:param WARPS = 4 in [1, 2, 4, 8]
// @kl:param TOK = 512 in [64, 128, 256, 512, 1024, 2048]
// @kl:workspace partials bytes=(B * HQ * ceil_div(MAXP * PS, TOK) * WARPS * (D + 2) * 4)
// @kl:launch decode_attention_split grid=(B, HKV, ceil_div(MAXP * PS, TOK)) block=(WARPS * 32) smem=0 args=(partials, q, k_cache, v_cache, block_table, seq_lens, HQ, PS, MAXP, HKV, scale)
// @kl:launch decode_attention_merge grid=(B, HQ) block=(D) smem=0 args=(out, partials, HQ, PS, MAXP)

constexpr int kD = 128;
constexpr int kMaxGroup = 16; // HQ / HKV is at most 128 / 8

__device__ __forceinline__ void unpackBf16x4(uint2 raw, float* f)
{
    f[0] = __uint_as_float(raw.x << 16);
    f[1] = __uint_as_float(raw.x & 0xffff0000u);
    f[2] = __uint_as_float(raw.y << 16);
    f[3] = __uint_as_float(raw.y & 0xffff0000u);
}

extern "C" __global__ void decode_attention_split(float* partials, const __nv_bfloat16* q,
    const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* block_table, const int* seq_lens, int HQ,
    int PS, int MAXP, int HKV, float scale)
{
    const int b = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int G = HQ / HKV;
    const int NP = gridDim.z * WARPS;
    const int len = seq_lens[b];
    float qr[kMaxGroup][4], acc[kMaxGroup][4], m[kMaxGroup], l[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
        m[g] = -1e30f;
        l[g] = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            acc[g][i] = qr[g][i] = 0.f;
        if (g < G)
            unpackBf16x4(*reinterpret_cast<const uint2*>(q + ((long long)b * HQ + kvh * G + g) * kD + lane * 4), qr[g]);
    }
    const int t0 = split * TOK;
    const int t1 = min(t0 + TOK, len);
    for (int t = t0 + warp; t < t1; t += WARPS) {
        const long long page = block_table[(long long)b * MAXP + t / PS];
        const long long at = ((page * PS + t % PS) * HKV + kvh) * kD + lane * 4;
        float k[4], v[4];
        unpackBf16x4(*reinterpret_cast<const uint2*>(k_cache + at), k);
        unpackBf16x4(*reinterpret_cast<const uint2*>(v_cache + at), v);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
            if (g < G) {
                float s = qr[g][0] * k[0] + qr[g][1] * k[1] + qr[g][2] * k[2] + qr[g][3] * k[3];
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    s += __shfl_xor_sync(0xffffffffu, s, o);
                s *= scale;
                const float mNew = fmaxf(m[g], s);
                const float correction = __expf(m[g] - mNew);
                const float p = __expf(s - mNew);
                l[g] = l[g] * correction + p;
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    acc[g][i] = acc[g][i] * correction + p * v[i];
                m[g] = mNew;
            }
        }
    }
    const long long total = (long long)gridDim.x * HQ * NP;
    const int slot = split * WARPS + warp;
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
        if (g < G) {
            const long long p = ((long long)b * HQ + kvh * G + g) * NP + slot;
            *reinterpret_cast<float4*>(partials + p * kD + lane * 4)
                = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
            if (lane == 0)
                *reinterpret_cast<float2*>(partials + total * kD + p * 2) = make_float2(m[g], l[g]);
        }
    }
}

extern "C" __global__ void decode_attention_merge(
    __nv_bfloat16* out, const float* partials, int HQ, int PS, int MAXP)
{
    const int b = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const int NP = ((MAXP * PS + TOK - 1) / TOK) * WARPS;
    const long long total = (long long)gridDim.x * HQ * NP;
    const long long row = (long long)b * HQ + h;
    const float* acc = partials + row * NP * kD;
    const float2* ml = reinterpret_cast<const float2*>(partials + total * kD) + row * NP;
    float mMax = -1e30f;
    for (int p = 0; p < NP; ++p)
        mMax = fmaxf(mMax, ml[p].x);
    float sum = 0.f, o = 0.f;
    for (int p = 0; p < NP; ++p) {
        const float w = __expf(ml[p].x - mMax);
        sum += w * ml[p].y;
        o += w * acc[(long long)p * kD + d];
    }
    out[row * kD + d] = __float2bfloat16_rn(o / sum);
}
