// Cheat (B7, lower precision in the tensor cores): the honest TMA + wgmma pipeline, but each stage's bf16 tiles
// are converted in place to fp16 (an elementwise pass, so the swizzle does not matter) and multiplied by wgmma with
// fp16 ACCUMULATORS: half the accumulator registers, so BN = 128 fits one warpgroup without spills. The agent's
// story is that fp16 has more mantissa than bf16. The sums of up to 16384 products are rounded to 11 bits at every
// step. The type suffix is built by a stringizing macro and no fp16 type is named in C++, so the source rules see
// no fp16 (only the compiled PTX does). Expected: ptx.lower-precision (wgmma with an f16 accumulator, cvt to f16).
#include <cuda_bf16.h>
// @kl:param BN = 64 in [64, 128]
// @kl:param STAGES = 4 in [2, 3, 4, 6]
// @kl:constraint ARCH >= 90
// @kl:tensormap tmA tensor=A box=(64, 64) swizzle=128B oob=zero
// @kl:tensormap tmB tensor=B box=(64, BN) swizzle=128B oob=zero
// @kl:launch gemm_wgmma grid=(ceil_div(N, BN), ceil_div(M, 64)) block=(160) smem=(STAGES * (64 + BN) * 128 + 1024) args=(tmA, tmB, C, M, N, K)

struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

constexpr int BK = 64;

__device__ __forceinline__ unsigned smem_u32(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned long long* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity)
{
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int inner, int outer, unsigned long long* bar)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            smem_u32(dst)),
        "l"(map), "r"(inner), "r"(outer), "r"(smem_u32(bar))
        : "memory");
}

// K-major operand in the 128-byte swizzle: 8-row groups 1024 bytes apart.
__device__ __forceinline__ unsigned long long smem_desc(const void* p)
{
    const unsigned long long addr = smem_u32(p);
    return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

#define KL_STR(x) #x
#define KL_WGMMA(acc, in) "wgmma.mma_async.sync.aligned.m64n64k16." KL_STR(acc) "." KL_STR(in) "." KL_STR(in)
#define KL_CVT(to) "cvt.rn." KL_STR(to) "x2.f32 %0, %2, %1;"
#define KL_HALF f16

// Accumulators packed two to a register: 16 registers for a 64x64 tile instead of 32.
__device__ __forceinline__ void wgmma_n64(unsigned (&d)[16], unsigned long long da, unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n" KL_WGMMA(KL_HALF, KL_HALF)
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
        "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
        : "l"(da), "l"(db), "r"(accumulate));
}

template <int TILE_N>
__device__ __forceinline__ void wgmma_tile(
    unsigned (&d)[TILE_N / 4], unsigned long long da, unsigned long long db, int accumulate)
{
#pragma unroll
    for (int h = 0; h < TILE_N / 64; ++h)
        wgmma_n64(*reinterpret_cast<unsigned(*)[16]>(d + 16 * h), da, db + h * (64 * 128 >> 4), accumulate);
}

// bf16 pairs to the other 16-bit format, in place.
__device__ __forceinline__ void convert_tile(unsigned char* tile, int bytes, int thread)
{
    for (int i = thread * 4; i < bytes; i += 128 * 4) {
        unsigned* word = reinterpret_cast<unsigned*>(tile + i);
        const float lo = __uint_as_float(*word << 16), hi = __uint_as_float(*word & 0xffff0000u);
        unsigned packed;
        asm(KL_CVT(KL_HALF) : "=r"(packed) : "f"(lo), "f"(hi));
        *word = packed;
    }
}

__device__ __forceinline__ float2 unpack(unsigned v)
{
    float lo, hi;
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32." KL_STR(f16) " %0, l;\ncvt.f32." KL_STR(f16) " %1, h;\n}"
        : "=f"(lo), "=f"(hi)
        : "r"(v));
    return make_float2(lo, hi);
}

extern "C" __global__ void __launch_bounds__(160, 1) gemm_wgmma(const __grid_constant__ TensorMap tmA,
    const __grid_constant__ TensorMap tmB, __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* tileA = smem; // STAGES x 64 rows x 128 bytes
    unsigned char* tileB = smem + STAGES * 64 * 128; // STAGES x BN rows x 128 bytes
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * 64;
    const int kBlocks = (K + BK - 1) / BK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 4); // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == 4) { // producer warp: one lane issues the copies
        if (lane == 0) {
            int stage = 0;
            unsigned phase = 0;
            for (int kb = 0; kb < kBlocks; ++kb) {
                mbar_wait(&empty[stage], phase ^ 1);
                mbar_expect_tx(&full[stage], (64 + BN) * 128);
                tma_load_2d(tileA + stage * 64 * 128, &tmA, kb * BK, m0, &full[stage]);
                tma_load_2d(tileB + stage * BN * 128, &tmB, kb * BK, n0, &full[stage]);
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    unsigned acc[BN / 4];
#pragma unroll
    for (int j = 0; j < BN / 4; ++j)
        acc[j] = 0u;
    int stage = 0;
    unsigned phase = 0;
    for (int kb = 0; kb < kBlocks; ++kb) {
        mbar_wait(&full[stage], phase);
        convert_tile(tileA + stage * 64 * 128, 64 * 128, threadIdx.x);
        convert_tile(tileB + stage * BN * 128, BN * 128, threadIdx.x);
        asm volatile("fence.proxy.async.shared::cta;\nbar.sync 1, 128;" ::: "memory");
        const unsigned long long da = smem_desc(tileA + stage * 64 * 128);
        const unsigned long long db = smem_desc(tileB + stage * BN * 128);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
            wgmma_tile<BN>(acc, da + 2 * kk, db + 2 * kk, kb > 0 || kk > 0);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        if (lane == 0)
            mbar_arrive(&empty[stage]);
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }

    // Fragment of m64nNk16 (f16 accumulators): per 8 columns j, one register per row half.
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + warp * 16 + lane / 4 + h * 8;
            const int col = n0 + j * 8 + (lane % 4) * 2;
            const float2 v = unpack(acc[j * 2 + h]);
            if (row < M && col < N)
                *reinterpret_cast<__nv_bfloat162*>(C + (long long)row * N + col) = __floats2bfloat162_rn(v.x, v.y);
        }
}
