// Tunable indexer on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulation; sm_80+). One CTA per
// (sequence, run of PAGES pages): the SQ index queries and weights are staged in shared memory once, then page by
// page the 64 keys are staged and each warp takes 16 tokens x 64 heads of one query row (8 k-steps x 8 n-tiles of
// mma), applies ReLU and the weights to its accumulators and sums the heads across the quad. Shared rows are padded
// to 136 elements so the fragment loads hit 32 different banks. Pages nobody sees are written -inf without math.
// Not yet: the next page's keys loaded (cp.async / TMA) while this one is multiplied; fp8 keys.
#include <cuda_bf16.h>
// @kl:param WARPS = 4 in [2, 4, 8]
// @kl:param PAGES = 4 in [1, 2, 4, 8, 16]
// @kl:launch dsa_indexer_template grid=(B, ceil_div(MAXP, PAGES)) block=(WARPS * 32) smem=((SQ * HI + PS) * (DI + 8) * 2 + SQ * HI * 4) args=(scores, q_index, weights, k_index_cache, block_table, seq_lens, SQ, MAXP)

__device__ __forceinline__ void mmaBf16(float* c, const unsigned* a, unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    dsa_indexer_template(float* __restrict__ scores, const __nv_bfloat16* __restrict__ q_index,
                         const float* __restrict__ weights, const __nv_bfloat16* __restrict__ k_index_cache,
                         const int* __restrict__ block_table, const int* __restrict__ seq_lens, int SQ, int MAXP)
{
    constexpr int HI = 64, DI = 128, PS = 64, PITCH = DI + 8, ROW_U4 = DI / 8;
    extern __shared__ __align__(16) unsigned char smemRaw[];
    __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smemRaw); // [SQ * HI][PITCH]
    __nv_bfloat16* ks = qs + SQ * HI * PITCH; // [PS][PITCH]
    float* ws = reinterpret_cast<float*>(ks + PS * PITCH); // [SQ * HI]
    const int b = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c2 = (lane % 4) * 2;
    const int seqLen = seq_lens[b];

    for (int i = threadIdx.x; i < SQ * HI * ROW_U4; i += WARPS * 32)
        *reinterpret_cast<uint4*>(qs + (i / ROW_U4) * PITCH + (i % ROW_U4) * 8)
            = reinterpret_cast<const uint4*>(q_index + (long long)b * SQ * HI * DI)[i];
    for (int i = threadIdx.x; i < SQ * HI; i += WARPS * 32)
        ws[i] = weights[(long long)b * SQ * HI + i];

    const int firstPage = blockIdx.y * PAGES, lastPage = min(firstPage + PAGES, MAXP);
    for (int p = firstPage; p < lastPage; ++p) {
        if (p * PS >= seqLen) { // past the sequence for every row
            for (int i = threadIdx.x; i < SQ * PS; i += WARPS * 32)
                scores[((long long)b * SQ + i / PS) * MAXP * PS + p * PS + i % PS] = __int_as_float(0xff800000);
            continue;
        }
        __syncthreads(); // the previous page's keys are no longer read (and, first, the queries are staged)
        const uint4* page
            = reinterpret_cast<const uint4*>(k_index_cache + (long long)block_table[(long long)b * MAXP + p] * PS * DI);
        for (int i = threadIdx.x; i < PS * ROW_U4; i += WARPS * 32)
            *reinterpret_cast<uint4*>(ks + (i / ROW_U4) * PITCH + (i % ROW_U4) * 8) = page[i];
        __syncthreads();
        for (int unit = warp; unit < SQ * (PS / 16); unit += WARPS) {
            const int j = unit / (PS / 16), m0 = (unit % (PS / 16)) * 16;
            const __nv_bfloat16* qj = qs + j * HI * PITCH;
            float acc[HI / 8][4];
#pragma unroll
            for (int n = 0; n < HI / 8; ++n)
                acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
            for (int k0 = 0; k0 < DI; k0 += 16) {
                unsigned a[4];
                a[0] = *reinterpret_cast<const unsigned*>(ks + (m0 + g) * PITCH + k0 + c2);
                a[1] = *reinterpret_cast<const unsigned*>(ks + (m0 + g + 8) * PITCH + k0 + c2);
                a[2] = *reinterpret_cast<const unsigned*>(ks + (m0 + g) * PITCH + k0 + c2 + 8);
                a[3] = *reinterpret_cast<const unsigned*>(ks + (m0 + g + 8) * PITCH + k0 + c2 + 8);
#pragma unroll
                for (int n = 0; n < HI / 8; ++n) {
                    const __nv_bfloat16* qrow = qj + (n * 8 + g) * PITCH + k0 + c2;
                    mmaBf16(acc[n], a, *reinterpret_cast<const unsigned*>(qrow),
                        *reinterpret_cast<const unsigned*>(qrow + 8));
                }
            }
            float top = 0.f, bottom = 0.f; // tokens m0 + g and m0 + g + 8
#pragma unroll
            for (int n = 0; n < HI / 8; ++n) {
                const float w0 = ws[j * HI + n * 8 + c2], w1 = ws[j * HI + n * 8 + c2 + 1];
                top += w0 * fmaxf(acc[n][0], 0.f) + w1 * fmaxf(acc[n][1], 0.f);
                bottom += w0 * fmaxf(acc[n][2], 0.f) + w1 * fmaxf(acc[n][3], 0.f);
            }
#pragma unroll
            for (int o = 1; o < 4; o <<= 1) {
                top += __shfl_xor_sync(0xffffffffu, top, o);
                bottom += __shfl_xor_sync(0xffffffffu, bottom, o);
            }
            if (lane % 4 == 0) {
                const int visible = seqLen - SQ + 1 + j, s = p * PS + m0 + g;
                float* row = scores + ((long long)b * SQ + j) * MAXP * PS;
                row[s] = s < visible ? top : __int_as_float(0xff800000);
                row[s + 8] = s + 8 < visible ? bottom : __int_as_float(0xff800000);
            }
        }
    }
}
