// Template: one CTA per (sequence, query row, group of HG heads), one warp per head, online softmax in fp32 on the
// CUDA cores. The CTA first compacts the TOPK slots into a list of cache rows (-1 dropped, through a block scan),
// then gathers TILE rows at a time into shared memory, STAGES = 2 overlapping the next tile's gather (cp.async on
// sm_80+) with this tile's math. A row's 1152 bytes are read HQ / HG times in all.
// What the >= 300 TFLOP/s target needs beyond this: the heads as the M side of tensor-core MMAs (S = Q K^T for 64+
// heads x TILE rows, then O += P V with O's 512 columns split over warps or warpgroups, wgmma on sm_90a),
// HQ / HG = 1 or 2 so each gathered row is read once per query row, and both SQ rows of a sequence in one CTA.
#include <cuda_bf16.h>
// @kl:param HG = 8 in [2, 4, 8, 16]
// @kl:param TILE = 16 in [8, 16, 32]
// @kl:param STAGES = 2 in [1, 2]
// @kl:launch sparse_mla_decode_template grid=(B * SQ, HQ / HG) block=(HG * 32) smem=(STAGES * TILE * DK * 2) args=(out, q, kv_cache, block_table, indices, SQ, MAXP, scale)

__device__ __forceinline__ void copy16(void* smem, const void* global)
{
#if __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(global));
#else
    *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(global);
#endif
}

__device__ __forceinline__ void commitCopies()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;");
#endif
}

template <int N>
__device__ __forceinline__ void waitCopies()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
#endif
}

extern "C" __global__ void __launch_bounds__(HG * 32)
    sparse_mla_decode_template(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ q,
                               const __nv_bfloat16* __restrict__ kv_cache, const int* __restrict__ block_table,
                               const int* __restrict__ indices, int SQ, int MAXP, float scale)
{
    constexpr int DK = 576, DV = 512, HQ = 128, PS = 64, TOPK = 2048, THREADS = HG * 32, PER = TOPK / THREADS;
    constexpr int ROW_U4 = DK / 8;
    extern __shared__ __align__(16) unsigned char smemRaw[];
    __nv_bfloat16* tiles = reinterpret_cast<__nv_bfloat16*>(smemRaw); // [STAGES][TILE][DK]
    __shared__ int rows[TOPK];
    __shared__ int warpTotals[HG];
    const int b = blockIdx.x / SQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y * HG + warp;

    // Compaction: thread t owns slots [t * PER, (t + 1) * PER); its valid rows go after those of the threads before it.
    const int* list = indices + (long long)blockIdx.x * TOPK + threadIdx.x * PER;
    int mine[PER];
    int count = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        mine[i] = list[i];
        count += mine[i] >= 0;
    }
    int inclusive = count;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o)
            inclusive += n;
    }
    if (lane == 31)
        warpTotals[warp] = inclusive;
    __syncthreads();
    int at = inclusive - count, n = 0;
    for (int w = 0; w < HG; ++w) {
        at += w < warp ? warpTotals[w] : 0;
        n += warpTotals[w];
    }
#pragma unroll
    for (int i = 0; i < PER; ++i)
        if (mine[i] >= 0)
            rows[at++] = block_table[(long long)b * MAXP + mine[i] / PS] * PS + mine[i] % PS;
    __syncthreads();

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

    const int tileCount = (n + TILE - 1) / TILE;
    auto gather = [&](int t) {
        __nv_bfloat16* dst = tiles + (t % STAGES) * TILE * DK;
        const int first = t * TILE, rowsHere = min(TILE, n - first);
        for (int idx = threadIdx.x; idx < rowsHere * ROW_U4; idx += THREADS)
            copy16(dst + idx * 8, kv_cache + (long long)rows[first + idx / ROW_U4] * DK + (idx % ROW_U4) * 8);
        commitCopies();
    };
    if (tileCount > 0)
        gather(0);
    for (int t = 0; t < tileCount; ++t) {
        if (STAGES == 1) {
            if (t > 0)
                gather(t);
            waitCopies<0>();
        } else if (t + 1 < tileCount) {
            gather(t + 1); // into the stage the previous tile used
            waitCopies<1>();
        } else {
            waitCopies<0>();
        }
        __syncthreads();
        const __nv_bfloat16* tile = tiles + (t % STAGES) * TILE * DK;
        const int rowsHere = min(TILE, n - t * TILE);
        for (int r = 0; r < rowsHere; ++r) {
            const __nv_bfloat162* row = reinterpret_cast<const __nv_bfloat162*>(tile + r * DK);
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
        __syncthreads(); // this stage is gathered into again two tiles on
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
    __nv_bfloat162* orow = reinterpret_cast<__nv_bfloat162*>(out + ((long long)blockIdx.x * HQ + h) * DV);
#pragma unroll
    for (int i = 0; i < DV / 64; ++i)
        orow[32 * i + lane] = __floats2bfloat162_rn(acc[2 * i] * inv, acc[2 * i + 1] * inv);
}
