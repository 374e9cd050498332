// Template, the straightforward start: one CTA per (sequence, query row, group of HG heads), one warp per head.
// The CTA stages TILE latent tokens in shared memory and every warp reads them for its head, so a token's 1152
// bytes come from memory once per head group: HQ / HG times in all, and the next tile's load waits for the math.
#include <cuda_bf16.h>
// @kl:param HG = 4 in [1, 2, 4, 8, 16]
// @kl:param TILE = 16 in [4, 8, 16, 32]
// @kl:launch mla_decode_template grid=(B * SQ, HQ / HG) block=(HG * 32) smem=(TILE * DK * 2) args=(out, q, kv_cache, block_table, seq_lens, SQ, MAXP, scale)
extern "C" __global__ void mla_decode_template(__nv_bfloat16* out, const __nv_bfloat16* q,
    const __nv_bfloat16* kv_cache, const int* block_table, const int* seq_lens, int SQ, int MAXP, float scale)
{
    constexpr int DK = 576, DV = 512, HQ = 128, PS = 64;
    extern __shared__ __align__(16) unsigned char smemRaw[];
    __nv_bfloat16* tile = reinterpret_cast<__nv_bfloat16*>(smemRaw);
    const int b = blockIdx.x / SQ, j = blockIdx.x % SQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y * HG + warp;
    // Lane holds the element pairs 64 i + 2 lane: 18 of the 576 query values, 16 of the 512 outputs.
    const __nv_bfloat162* qrow = reinterpret_cast<const __nv_bfloat162*>(q + (((long long)b * SQ + j) * HQ + h) * DK);
    float qv[DK / 32], acc[DV / 32];
#pragma unroll
    for (int i = 0; i < DK / 64; ++i) {
        const float2 f = __bfloat1622float2(qrow[32 * i + lane]);
        qv[2 * i] = f.x;
        qv[2 * i + 1] = f.y;
    }
#pragma unroll
    for (int i = 0; i < DV / 32; ++i)
        acc[i] = 0.f;
    float m = -1e30f, l = 0.f;
    const int visible = seq_lens[b] - SQ + 1 + j;
    for (int s0 = 0; s0 < visible; s0 += TILE) {
        const int n = min(TILE, visible - s0);
        __syncthreads();
        for (int idx = threadIdx.x; idx < n * (DK / 8); idx += blockDim.x) {
            const int t = idx / (DK / 8), c = idx % (DK / 8);
            const int s = s0 + t;
            const long long page = block_table[(long long)b * MAXP + s / PS];
            reinterpret_cast<uint4*>(tile)[idx]
                = reinterpret_cast<const uint4*>(kv_cache + (page * PS + s % PS) * DK)[c];
        }
        __syncthreads();
        for (int t = 0; t < n; ++t) {
            const __nv_bfloat162* row = reinterpret_cast<const __nv_bfloat162*>(tile + t * DK);
            float dot = 0.f;
#pragma unroll
            for (int i = 0; i < DK / 64; ++i) {
                const float2 k = __bfloat1622float2(row[32 * i + lane]);
                dot += qv[2 * i] * k.x + qv[2 * i + 1] * k.y;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                dot += __shfl_xor_sync(0xffffffffu, dot, o);
            dot *= scale;
            const float mNew = fmaxf(m, dot);
            const float correction = __expf(m - mNew);
            const float p = __expf(dot - mNew);
            l = l * correction + p;
#pragma unroll
            for (int i = 0; i < DV / 64; ++i) {
                const float2 v = __bfloat1622float2(row[32 * i + lane]);
                acc[2 * i] = acc[2 * i] * correction + p * v.x;
                acc[2 * i + 1] = acc[2 * i + 1] * correction + p * v.y;
            }
            m = mNew;
        }
    }
    __nv_bfloat162* orow = reinterpret_cast<__nv_bfloat162*>(out + (((long long)b * SQ + j) * HQ + h) * DV);
#pragma unroll
    for (int i = 0; i < DV / 64; ++i)
        orow[32 * i + lane] = __floats2bfloat162_rn(acc[2 * i] / l, acc[2 * i + 1] / l);
}
