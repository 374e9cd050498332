// Cheat (attending a part of the selection): only the first 512 of the 2048 listed positions are attended, on the
// belief that the indexer lists its best positions first. The list is the selected positions in ascending order,
// so this keeps the oldest quarter of the selection. Exact when at most 512 positions are listed (contexts up to
// 512 tokens), wrong on every tuning shape. Expected: correctness.rel-l2 / correctness.max-abs.
#include <cuda_bf16.h>
// @kl:launch sparse_mla_first_quarter grid=(B * SQ, HQ / 8) block=(256) smem=(16 * DK * 2) args=(out, q, kv_cache, block_table, indices, SQ, MAXP, scale)
extern "C" __global__ void sparse_mla_first_quarter(__nv_bfloat16* out, const __nv_bfloat16* q,
    const __nv_bfloat16* kv_cache, const int* block_table, const int* indices, int SQ, int MAXP, float scale)
{
    constexpr int DK = 576, DV = 512, HQ = 128, PS = 64, TOPK = 2048, HG = 8, TILE = 16;
    extern __shared__ __align__(16) unsigned char smemRaw[];
    __nv_bfloat16* tile = reinterpret_cast<__nv_bfloat16*>(smemRaw);
    __shared__ int rows[TILE];
    __shared__ int filled, nextSlot;
    const int b = blockIdx.x / SQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y * HG + warp;
    const int* list = indices + (long long)blockIdx.x * TOPK;
    const __nv_bfloat162* qrow = reinterpret_cast<const __nv_bfloat162*>(q + ((long long)blockIdx.x * HQ + h) * DK);
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
    constexpr int ATTENDED = TOPK / 4;
    for (int slot0 = 0; slot0 < ATTENDED;) {
        __syncthreads();
        if (threadIdx.x == 0) { // the next TILE listed rows
            int n = 0;
            for (; slot0 < ATTENDED && n < TILE; ++slot0) {
                const int s = list[slot0];
                if (s >= 0)
                    rows[n++] = (int)(block_table[(long long)b * MAXP + s / PS] * PS + s % PS);
            }
            filled = n;
            nextSlot = slot0;
        }
        __syncthreads();
        slot0 = nextSlot;
        const int n = filled;
        for (int idx = threadIdx.x; idx < n * (DK / 8); idx += blockDim.x)
            reinterpret_cast<uint4*>(tile)[idx]
                = reinterpret_cast<const uint4*>(kv_cache + (long long)rows[idx / (DK / 8)] * DK)[idx % (DK / 8)];
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
    const float inv = l > 0.f ? 1.f / l : 0.f;
    __nv_bfloat162* orow = reinterpret_cast<__nv_bfloat162*>(out + ((long long)blockIdx.x * HQ + h) * DV);
#pragma unroll
    for (int i = 0; i < DV / 64; ++i)
        orow[32 * i + lane] = __floats2bfloat162_rn(acc[2 * i] * inv, acc[2 * i + 1] * inv);
}
