// gemm_bf16 written with CuTe, SM80-style (mma.sync + cp.async: it runs on sm_80 .. sm_90a): C[M,N] = A[M,K] *
// B[N,K]^T, bf16 in, fp32 accumulate, bf16 out. The sweep-rate bench's CuTe candidate: every point of its space
// compiles against the CUTLASS headers, which is what NVRTC's compile time per candidate is measured on.
//  - cp.async copies 16 bytes per thread of BMxBK (A) and BNxBK (B) tiles into a ring of STAGES shared-memory stages,
//    swizzled so that ldmatrix reads them without bank conflicts; rows past M or N are zero-filled (src-size 0, no
//    global read), so any M works and N need not be a multiple of BN.
//  - WM x WN warps, each a 16x16 piece of mma.sync m16n8k16 (the N atom twice), repeated over the warp's share of
//    the tile; ldmatrix x4 loads the fragments of one BK/16 step at a time.
//  - The stage that was read one k-tile ago is refilled while this one is multiplied (one __syncthreads per k-tile).
//  - fp32 accumulators are rounded to bf16 and stored with the same row/column predicates.
// K is a multiple of 64 for this problem; the constraint states what the mainloop relies on.
// NVRTC 13.0 spends about 35-40 s of CPU on one point (2-core CI-class machine): ~3 s parsing the CuTe headers,
// ~24 s instantiating this kernel's layouts and copies (the ldmatrix tiled copies the most), ~10 s in NVVM and
// ptxas. A precompiled header (-pch, the parameters defined after the header stop) only saves the parse, ~7%.
#include <cute/tensor.hpp>
// @kl:param BM = 128 in [64, 128, 256]
// @kl:param BN = 128 in [64, 128, 256]
// @kl:param BK = 32 in [32, 64]
// @kl:param STAGES = 3 in [2, 3, 4, 5]
// @kl:param WM = 2 in [1, 2, 4]
// @kl:param WN = 2 in [1, 2, 4]
// @kl:constraint BM % (16 * WM) == 0 && BN % (16 * WN) == 0
// @kl:constraint BM % (WM * WN * 256 / BK) == 0 && BN % (WM * WN * 256 / BK) == 0
// @kl:constraint BM * BN <= 4096 * WM * WN && WM * WN <= 8
// @kl:constraint STAGES * (BM + BN) * BK * 2 <= 232448
// @kl:constraint K % BK == 0
// @kl:launch gemm_cute_sm80 grid=(ceil_div(N, BN), ceil_div(M, BM)) block=(WM * WN * 32) smem=(STAGES * (BM + BN) * BK * 2) args=(C, A, B, M, N, K)

using namespace cute;
using Elem = cutlass::bfloat16_t;
constexpr int THREADS = WM * WN * 32;

// K-major tiles: 8 rows of BK elements per swizzle atom; the XOR spreads the 16-byte chunks of 8 consecutive rows
// over distinct banks (3 bits for 128-byte rows, 2 for 64-byte rows).
using SmemAtom = decltype(composition(Swizzle<BK == 64 ? 3 : 2, 3, 3> {},
    Layout<Shape<_8, Int<BK>>, Stride<Int<BK>, _1>> {}));
using SmemLayoutA = decltype(tile_to_shape(SmemAtom {}, Shape<Int<BM>, Int<BK>, Int<STAGES>> {}));
using SmemLayoutB = decltype(tile_to_shape(SmemAtom {}, Shape<Int<BN>, Int<BK>, Int<STAGES>> {}));

using TiledMma = decltype(make_tiled_mma(MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN> {},
    Layout<Shape<Int<WM>, Int<WN>, _1>> {}, Tile<Int<16 * WM>, Int<16 * WN>, _16> {}));

// BK/8 threads per row, each copying 8 elements.
using GmemCopy = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<uint128_t>, Elem> {},
    Layout<Shape<Int<THREADS * 8 / BK>, Int<BK / 8>>, Stride<Int<BK / 8>, _1>> {}, Layout<Shape<_1, _8>> {}));

extern "C" __global__ void __launch_bounds__(THREADS)
    gemm_cute_sm80(__nv_bfloat16* __restrict__ C, const __nv_bfloat16* __restrict__ A,
                   const __nv_bfloat16* __restrict__ B, int M, int N, int K)
{
    extern __shared__ __align__(128) unsigned char smem[];
    Elem* smemA = reinterpret_cast<Elem*>(smem);
    Elem* smemB = smemA + cosize(SmemLayoutA {});
    Tensor sA = make_tensor(make_smem_ptr(smemA), SmemLayoutA {}); // (BM, BK, STAGES)
    Tensor sB = make_tensor(make_smem_ptr(smemB), SmemLayoutB {}); // (BN, BK, STAGES)

    Tensor mA = make_tensor(make_gmem_ptr(reinterpret_cast<const Elem*>(A)), make_shape(M, K), make_stride(K, _1 {}));
    Tensor mB = make_tensor(make_gmem_ptr(reinterpret_cast<const Elem*>(B)), make_shape(N, K), make_stride(K, _1 {}));
    Tensor mC = make_tensor(make_gmem_ptr(reinterpret_cast<Elem*>(C)), make_shape(M, N), make_stride(N, _1 {}));
    const int bm = blockIdx.y, bn = blockIdx.x;
    Tensor gA = local_tile(mA, Shape<Int<BM>, Int<BK>> {}, make_coord(bm, _)); // (BM, BK, k-tiles)
    Tensor gB = local_tile(mB, Shape<Int<BN>, Int<BK>> {}, make_coord(bn, _)); // (BN, BK, k-tiles)
    Tensor gC = local_tile(mC, Shape<Int<BM>, Int<BN>> {}, make_coord(bm, bn)); // (BM, BN)
    // Rows (of A, of B) and columns of C this block may touch; the tile's coordinates are compared with them.
    const int rowsA = M - bm * BM, rowsB = N - bn * BN;

    GmemCopy gmemCopy;
    auto gmemThr = gmemCopy.get_slice(threadIdx.x);
    Tensor tAgA = gmemThr.partition_S(gA); // (CPY, CPY_M, CPY_K, k-tiles)
    Tensor tAsA = gmemThr.partition_D(sA); // (CPY, CPY_M, CPY_K, STAGES)
    Tensor tBgB = gmemThr.partition_S(gB);
    Tensor tBsB = gmemThr.partition_D(sB);
    // One predicate per copied row, the same for every k: (CPY_M, CPY_K) with a 0 stride along K.
    Tensor tAcA = gmemThr.partition_S(make_identity_tensor(Shape<Int<BM>, Int<BK>> {}));
    Tensor tBcB = gmemThr.partition_S(make_identity_tensor(Shape<Int<BN>, Int<BK>> {}));
    Tensor tApA = make_tensor<bool>(make_shape(size<1>(tAsA), size<2>(tAsA)), make_stride(_1 {}, _0 {}));
    Tensor tBpB = make_tensor<bool>(make_shape(size<1>(tBsB), size<2>(tBsB)), make_stride(_1 {}, _0 {}));
    CUTE_UNROLL
    for (int m = 0; m < size<0>(tApA); ++m)
        tApA(m, 0) = get<0>(tAcA(0, m, 0)) < rowsA;
    CUTE_UNROLL
    for (int n = 0; n < size<0>(tBpB); ++n)
        tBpB(n, 0) = get<0>(tBcB(0, n, 0)) < rowsB;
    auto loadTile = [&](int k, int stage) {
        copy_if(gmemCopy, tApA, tAgA(_, _, _, k), tAsA(_, _, _, stage));
        copy_if(gmemCopy, tBpB, tBgB(_, _, _, k), tBsB(_, _, _, stage));
    };

    TiledMma mma;
    auto thrMma = mma.get_slice(threadIdx.x);
    Tensor tCrA = thrMma.partition_fragment_A(sA(_, _, 0)); // (MMA, MMA_M, MMA_K)
    Tensor tCrB = thrMma.partition_fragment_B(sB(_, _, 0)); // (MMA, MMA_N, MMA_K)
    Tensor acc = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>> {}); // (MMA, MMA_M, MMA_N) fp32
    clear(acc);

    auto smemCopyA = make_tiled_copy_A(Copy_Atom<SM75_U32x4_LDSM_N, Elem> {}, mma);
    auto smemThrA = smemCopyA.get_slice(threadIdx.x);
    Tensor tXsA = smemThrA.partition_S(sA); // (CPY, CPY_M, CPY_K, STAGES)
    Tensor tXrA = smemThrA.retile_D(tCrA);
    auto smemCopyB = make_tiled_copy_B(Copy_Atom<SM75_U32x4_LDSM_N, Elem> {}, mma);
    auto smemThrB = smemCopyB.get_slice(threadIdx.x);
    Tensor tXsB = smemThrB.partition_S(sB);
    Tensor tXrB = smemThrB.retile_D(tCrB);

    // Prologue: STAGES - 1 tiles in flight, one cp.async group each (empty groups past the last tile keep the count).
    const int kTiles = size<3>(tAgA);
    CUTE_UNROLL
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < kTiles)
            loadTile(s, s);
        cp_async_fence();
    }
    for (int kt = 0; kt < kTiles; ++kt) {
        // Tile kt has landed; after the barrier nobody still reads the stage of tile kt - 1, which is refilled.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = kt + STAGES - 1;
        if (next < kTiles)
            loadTile(next, next % STAGES);
        cp_async_fence();
        const int stage = kt % STAGES;
        CUTE_UNROLL
        for (int kb = 0; kb < size<2>(tCrA); ++kb) {
            copy(smemCopyA, tXsA(_, _, kb, stage), tXrA(_, _, kb));
            copy(smemCopyB, tXsB(_, _, kb, stage), tXrB(_, _, kb));
            gemm(mma, tCrA(_, _, kb), tCrB(_, _, kb), acc);
        }
    }

    Tensor tCgC = thrMma.partition_C(gC);
    Tensor tCcC = thrMma.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>> {}));
    CUTE_UNROLL
    for (int i = 0; i < size(acc); ++i)
        if (get<0>(tCcC(i)) < rowsA && get<1>(tCcC(i)) < rowsB)
            tCgC(i) = Elem(acc(i));
}
