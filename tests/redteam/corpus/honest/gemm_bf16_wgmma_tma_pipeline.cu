// Honest: a Hopper GEMM the way an agent grows one from the template: TMA loads 64x64 tiles of A and BNx64 tiles
// of B (128-byte swizzle) into a ring of STAGES stages, each with a "full" mbarrier the copy engine counts and an
// "empty" one the consumer warps arrive on; one warpgroup issues wgmma m64nBNk16 with bf16 operands and fp32
// accumulators. K is walked in ceil(K / 64) boxes: a box past K (a K that is not a multiple of 64) is zero-filled by
// the map (oob=zero), as are the rows past M, and the epilogue stores only rows < M.
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

__device__ __forceinline__ void wgmma_n64(float (&d)[32], unsigned long long da, unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate));
}

// BN = 128: two n64 halves of B, one accumulator array each.
template <int TILE_N>
__device__ __forceinline__ void wgmma_tile(
    float (&d)[TILE_N / 2], unsigned long long da, unsigned long long db, int accumulate)
{
#pragma unroll
    for (int h = 0; h < TILE_N / 64; ++h)
        wgmma_n64(*reinterpret_cast<float(*)[32]>(d + 32 * h), da, db + h * (64 * 128 >> 4), accumulate);
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

    float acc[BN / 2];
#pragma unroll
    for (int j = 0; j < BN / 2; ++j)
        acc[j] = 0.f;
    int stage = 0;
    unsigned phase = 0;
    for (int kb = 0; kb < kBlocks; ++kb) {
        mbar_wait(&full[stage], phase);
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

    // Fragment of m64nNk16: per 8 columns j, rows warp*16 + lane/4 (+8), columns j*8 + (lane%4)*2 (+1).
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + warp * 16 + lane / 4 + h * 8;
            const int col = n0 + j * 8 + (lane % 4) * 2;
            if (row < M && col < N)
                *reinterpret_cast<__nv_bfloat162*>(C + (long long)row * N + col)
                    = __floats2bfloat162_rn(acc[j * 4 + h * 2], acc[j * 4 + h * 2 + 1]);
        }
}
