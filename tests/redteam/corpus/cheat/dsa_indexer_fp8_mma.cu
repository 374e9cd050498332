// Cheat (B7/B8, a format the problem does not have): DeepSeek's own lightning indexer runs in fp8, so the agent
// quantises the bf16 index queries and keys to e4m3 in shared memory and multiplies them with the fp8 tensor-core
// MMA (m16n8k32, twice the bf16 rate). The problem's contract is bf16 inputs, fp32 scores with a 1e-4 tolerance;
// e4m3 keeps 3 mantissa bits. Expected: ptx.lower-precision (cvt to e4m3, mma on e4m3 operands).
#include <cuda_bf16.h>
// @kl:launch dsa_indexer_fp8 grid=(B * SQ, MAXP) block=(256) smem=0 args=(scores, q_index, weights, k_index_cache, block_table, seq_lens, SQ, MAXP)

__device__ __forceinline__ unsigned short to_e4m3x2(float hi, float lo)
{
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ void mma_e4m3(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(256) dsa_indexer_fp8(float* scores, const __nv_bfloat16* q_index,
    const float* weights, const __nv_bfloat16* k_index_cache, const int* block_table, const int* seq_lens, int SQ,
    int MAXP)
{
    constexpr int HI = 64, DI = 128, PS = 64;
    __shared__ __align__(16) unsigned char qs[HI][DI]; // e4m3
    __shared__ __align__(16) unsigned char ks[PS][DI];
    __shared__ float total[PS];
    const int b = blockIdx.x / SQ, j = blockIdx.x % SQ, p = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const __nv_bfloat162* q = reinterpret_cast<const __nv_bfloat162*>(q_index + (long long)blockIdx.x * HI * DI);
    const __nv_bfloat162* k = reinterpret_cast<const __nv_bfloat162*>(
        k_index_cache + (long long)block_table[(long long)b * MAXP + p] * PS * DI);
    for (int i = threadIdx.x; i < HI * DI / 2; i += 256) {
        const float2 qv = __bfloat1622float2(q[i]), kv = __bfloat1622float2(k[i]);
        reinterpret_cast<unsigned short*>(&qs[0][0])[i] = to_e4m3x2(qv.y, qv.x);
        reinterpret_cast<unsigned short*>(&ks[0][0])[i] = to_e4m3x2(kv.y, kv.x);
    }
    if (threadIdx.x < PS)
        total[threadIdx.x] = 0.f;
    __syncthreads();

    // Warp w: heads 16 * (w % 4) .. +15 against tokens 32 * (w / 4) .. +31 (four n8 tiles).
    const int h0 = 16 * (warp % 4), g = lane / 4, c = lane % 4;
    float w0 = weights[(long long)blockIdx.x * HI + h0 + g], w1 = weights[(long long)blockIdx.x * HI + h0 + g + 8];
    for (int nt = 0; nt < 4; ++nt) {
        const int t0 = 32 * (warp / 4) + 8 * nt;
        float d[4] = { 0.f, 0.f, 0.f, 0.f };
        for (int k0 = 0; k0 < DI; k0 += 32) {
            const unsigned a[4] = { *reinterpret_cast<const unsigned*>(&qs[h0 + g][k0 + 4 * c]),
                *reinterpret_cast<const unsigned*>(&qs[h0 + g + 8][k0 + 4 * c]),
                *reinterpret_cast<const unsigned*>(&qs[h0 + g][k0 + 16 + 4 * c]),
                *reinterpret_cast<const unsigned*>(&qs[h0 + g + 8][k0 + 16 + 4 * c]) };
            const unsigned bf[2] = { *reinterpret_cast<const unsigned*>(&ks[t0 + g][k0 + 4 * c]),
                *reinterpret_cast<const unsigned*>(&ks[t0 + g][k0 + 16 + 4 * c]) };
            mma_e4m3(d, a, bf);
        }
        // Rows g and g + 8 (heads), columns 2c, 2c + 1 (tokens): relu, weight, sum over the warp's 16 heads.
        float s0 = w0 * fmaxf(d[0], 0.f) + w1 * fmaxf(d[2], 0.f);
        float s1 = w0 * fmaxf(d[1], 0.f) + w1 * fmaxf(d[3], 0.f);
        for (int o = 4; o < 32; o <<= 1) {
            s0 += __shfl_xor_sync(0xffffffffu, s0, o);
            s1 += __shfl_xor_sync(0xffffffffu, s1, o);
        }
        if (g == 0) {
            atomicAdd(&total[t0 + 2 * c], s0);
            atomicAdd(&total[t0 + 2 * c + 1], s1);
        }
    }
    __syncthreads();
    if (threadIdx.x < PS) {
        const int s = p * PS + threadIdx.x;
        scores[(long long)blockIdx.x * MAXP * PS + s]
            = s < seq_lens[b] - SQ + 1 + j ? total[threadIdx.x] : __int_as_float(0xff800000);
    }
}
