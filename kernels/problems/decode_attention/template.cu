// Template: split-KV decode (flash-decoding). A CTA takes one (sequence, KV head, split of TOK tokens) and serves
// all G = HQ / HKV query heads from one read of each K/V row. A warp takes 32 tokens at a time, one per lane: each
// lane computes its token's scores for every head (q, pre-scaled, broadcast from shared memory), the warp updates
// an online softmax per head with two reductions per tile, then each lane accumulates 4 output dims over the tile's
// tokens (V rows read coalesced). Each warp writes a partial (acc, m, l) to the workspace; the merge kernel
// combines a head's partials.
#include <cuda_bf16.h>
// @kl:param WARPS = 4 in [1, 2, 4, 8]
// @kl:param TOK = 256 in [32, 64, 128, 256, 512, 1024, 2048]
// @kl:constraint TOK % (32 * WARPS) == 0
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
    __shared__ __align__(16) float qs[kMaxGroup][kD];
    __shared__ float ps[WARPS][32][kMaxGroup + 1];
    const int b = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int G = HQ / HKV;
    const int NP = gridDim.z * WARPS;
    const int len = seq_lens[b];
    for (int i = threadIdx.x; i < G * kD; i += blockDim.x)
        qs[i / kD][i % kD] = __bfloat162float(q[((long long)b * HQ + kvh * G) * kD + i]) * scale;
    __syncthreads();
    float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][4];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
        m[g] = -1e30f;
        l[g] = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            acc[g][i] = 0.f;
    }
    const int t0 = split * TOK;
    const int t1 = min(t0 + TOK, len);
    for (int base = t0 + warp * 32; base < t1; base += WARPS * 32) {
        const int t = base + lane;
        const bool valid = t < t1;
        float s[kMaxGroup];
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g)
            s[g] = 0.f;
        long long at = 0;
        if (valid) {
            const long long page = block_table[(long long)b * MAXP + t / PS];
            at = ((page * PS + t % PS) * HKV + kvh) * kD;
            const uint4* kr = reinterpret_cast<const uint4*>(k_cache + at);
#pragma unroll 2
            for (int c = 0; c < kD / 8; ++c) {
                const uint4 raw = kr[c];
                float k[8];
                unpackBf16x4(make_uint2(raw.x, raw.y), k);
                unpackBf16x4(make_uint2(raw.z, raw.w), k + 4);
#pragma unroll
                for (int g = 0; g < kMaxGroup; ++g) {
                    if (g < G) {
                        const float4 qa = *reinterpret_cast<const float4*>(&qs[g][c * 8]);
                        const float4 qb = *reinterpret_cast<const float4*>(&qs[g][c * 8 + 4]);
                        s[g] += qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] + qb.y * k[5]
                            + qb.z * k[6] + qb.w * k[7];
                    }
                }
            }
        }
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
            if (g < G) {
                const float sv = valid ? s[g] : -1e30f;
                float tileMax = sv;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, o));
                const float mNew = fmaxf(m[g], tileMax);
                const float p = valid ? __expf(sv - mNew) : 0.f;
                float tileSum = p;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    tileSum += __shfl_xor_sync(0xffffffffu, tileSum, o);
                const float correction = __expf(m[g] - mNew);
                l[g] = l[g] * correction + tileSum;
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    acc[g][i] *= correction;
                m[g] = mNew;
                ps[warp][lane][g] = p;
            }
        }
        __syncwarp();
        const int n = min(32, t1 - base);
        for (int j = 0; j < n; ++j) {
            const long long atj = __shfl_sync(0xffffffffu, at, j);
            float v[4];
            unpackBf16x4(*reinterpret_cast<const uint2*>(v_cache + atj + lane * 4), v);
#pragma unroll
            for (int g = 0; g < kMaxGroup; ++g) {
                if (g < G) {
                    const float p = ps[warp][j][g];
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        acc[g][i] += p * v[i];
                }
            }
        }
        __syncwarp();
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
