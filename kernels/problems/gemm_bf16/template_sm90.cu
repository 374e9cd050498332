// Hopper GEMM (sm_90a): C[M,N] = A[M,K] * B[N,K]^T, bf16 in, fp32 accumulate, bf16 out. Raw PTX rather than
// CuTe: it compiles with NVRTC in well under a second (a sweep compiles every point) and every instruction the
// referee reads is in this file. Two paths chosen by the launch lines' grids (a grid of 0 is not launched):
// M > SKINNY_M runs the persistent kernel below (BM .. REGSPLIT), M <= SKINNY_M the skinny kernel at the end of the
// file (SBN, SKMAX), whose split of K over a cluster and ring depth come from the shape and SM_COUNT, so one point
// serves every N and K. SKINNY_M is the tuner's: on the H200 the skinny kernel beats cuBLAS at M = 16 and trails the
// persistent kernel at M = 128 (bench/results/round8-h200-2026-12-03.md). The defaults are the point measured best over
// the decode shapes M = 16 and 128 on the H200 (round 10: 128-wide tiles fitted to the SMs, K split in two over a
// cluster); the prefill shapes prefer BN = 256, STAGES = 4, which a session's prefill regime finds.
//  - TMA (cp.async.bulk.tensor) loads BMx64 tiles of A and BNx64 tiles of B, 128-byte swizzled, into a ring of
//    STAGES shared-memory stages; each stage has a "full" mbarrier (the copy engine's byte count) and an "empty"
//    one (every consumer warp arrives once it is done with the stage).
//  - Clusters (CM = 2): the two blocks of a cluster take vertically adjacent tiles (same B panel); each loads half
//    of the B tile and multicasts it into both blocks' shared memory, so B crosses from L2 once per pair. A stage
//    is free again only when the consumers of both blocks released it (remote mbarrier arrives).
//  - Warp specialisation: warpgroup 0 produces (one thread issues the copies; with REGSPLIT=1 setmaxnreg.dec
//    gives its registers to the consumers' setmaxnreg.inc), warpgroups 1..BM/64 consume: each owns 64 rows of the
//    tile and issues wgmma m64nBNk16 from shared memory, keeping one k-block of MMAs in flight
//    (wgmma.wait_group 1) before releasing the stage before it.
//  - Persistent: the blocks walk the work units (tile x k-split) in a grouped raster (GROUP tiles along M
//    when RASTER=0, along N when RASTER=1) so neighbouring blocks share A or B panels in L2.
//  - Split-K: with SPLITK > 1 each unit writes fp32 partials to the workspace; REDUCE=0 sums them in
//    a second kernel launched with programmatic dependent launch, REDUCE=1 in the GEMM itself: the split that
//    arrives last at its tile's counter adds the others' partials (no second launch, no waiting). REDUCE=2 (with
//    FIT >= 1) makes a tile's splits one cluster: each block owns a slice of the tile's columns, leaves the others'
//    slices of its fp32 partials in its own shared memory and adds its slice of every partner's through distributed
//    shared memory (no workspace, no second launch, the reduction's reads spread over the cluster).
//  - FIT=1 sizes the work to one wave where the BM x BN tiles leave SMs idle (decode-sized M): if BM x 64 tiles
//    still fit on the SMs, the narrow kernel (gemm_tma_wgmma_narrow, BN = 64, a deeper ring in the same shared
//    memory) takes them, and either kernel splits K up to SPLITK times while the units still fit. One point then
//    serves N = 4096 (64-wide tiles, two splits at M = 128) and N = 14336 (128-wide tiles, no split). The launch
//    lines pick the kernel and the split; the kernel reads its split back from its grid, the reduction from its
//    grid's y extent. FIT=2 fits the BM x BN tiles alone (no narrow kernel): fewer, wider tiles split more ways read
//    the shared A rows fewer times.
// @kl:param BM = 128 in [64, 128]
// @kl:param BN = 128 in [64, 128, 256]
// @kl:param STAGES = 6 in [2, 3, 4, 5, 6, 8]
// @kl:param SPLITK = 2 in [1, 2, 4, 8, 16]
// @kl:param REDUCE = 2 in [0, 1, 2]
// @kl:param CM = 1 in [1, 2]
// @kl:param GROUP = 8 in [1, 8, 16]
// @kl:param RASTER = 0 in [0, 1]
// @kl:param REGSPLIT = 0 in [0, 1]
// @kl:param SBN = 64 in [64, 128, 256]
// @kl:param SKMAX = 8 in [1, 2, 4, 8]
// @kl:param SKINNY_M = 32 in [16, 32, 64, 128]
// @kl:param FIT = 1 in [0, 1, 2]
// @kl:constraint ARCH >= 90
// @kl:constraint STAGES * (BM + BN) * 128 + 1024 + 16 * STAGES <= 232448
// @kl:constraint REGSPLIT == 0 || BM == 128
// @kl:constraint REDUCE == 0 || SPLITK > 1
// @kl:constraint REDUCE != 2 || (FIT >= 1 && CM == 1 && SPLITK <= 8 && STAGES * (BM + BN) >= BM * BN / 32)
// @kl:workspace part bytes=(M > SKINNY_M && SPLITK > 1 && REDUCE != 2 ? SPLITK * M * N * 4 : 0) init=poison
// @kl:workspace arrivals bytes=(M > SKINNY_M && REDUCE == 1 ? ceil_div(M, BM) * ceil_div(N, FIT == 1 ? 64 : BN) * 4 : 0) init=zero
// @kl:tensormap tmA tensor=A box=(64, BM) swizzle=128B l2promo=256B oob=zero
// @kl:tensormap tmB tensor=B box=(64, BN / CM) swizzle=128B l2promo=256B oob=zero
// @kl:tensormap tmB64 tensor=B box=(64, 64 / CM) swizzle=128B l2promo=256B oob=zero
// @kl:tensormap tmW tensor=B box=(64, SBN) swizzle=128B l2promo=256B oob=zero
// @kl:tensormap tmX tensor=A box=(64, 16) swizzle=128B l2promo=256B oob=zero
// @kl:launch gemm_tma_wgmma grid=(M > SKINNY_M && (FIT == 1 && BN > 64 && ceil_div(M, BM * CM) * ceil_div(N, 64) <= div(SM_COUNT, CM)) == 0 ? CM * min(ceil_div(M, BM * CM) * ceil_div(N, BN) * (FIT >= 1 ? max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, BN)))) : SPLITK), div(SM_COUNT, CM)) : 0) block=((BM / 64 + 1) * 128) smem=(STAGES * (BM + BN) * 128 + 1024 + 16 * STAGES) cluster=(REDUCE == 2 ? max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, BN)))) : CM, 1, 1) args=(tmA, tmB, C, part, arrivals, M, N, K)
// @kl:launch gemm_tma_wgmma_narrow grid=(M > SKINNY_M && FIT == 1 && BN > 64 && ceil_div(M, BM * CM) * ceil_div(N, 64) <= div(SM_COUNT, CM) ? CM * ceil_div(M, BM * CM) * ceil_div(N, 64) * max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, 64)))) : 0) block=((BM / 64 + 1) * 128) smem=(min(8, div(STAGES * (BM + BN), BM + 64)) * (BM + 64) * 128 + 1024 + 16 * min(8, div(STAGES * (BM + BN), BM + 64))) cluster=(REDUCE == 2 ? max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, 64)))) : CM, 1, 1) args=(tmA, tmB64, C, part, arrivals, M, N, K)
// @kl:launch gemm_splitk_reduce grid=(M > SKINNY_M && REDUCE == 0 && (FIT == 0 ? SPLITK : (FIT == 1 && BN > 64 && ceil_div(M, BM * CM) * ceil_div(N, 64) <= div(SM_COUNT, CM) ? max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, 64)))) : max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, BN)))))) > 1 ? ceil_div(M * N, 1024 * (FIT == 0 ? SPLITK : (FIT == 1 && BN > 64 && ceil_div(M, BM * CM) * ceil_div(N, 64) <= div(SM_COUNT, CM) ? max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, 64)))) : max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, BN))))))) : 0, (FIT == 0 ? SPLITK : (FIT == 1 && BN > 64 && ceil_div(M, BM * CM) * ceil_div(N, 64) <= div(SM_COUNT, CM) ? max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, 64)))) : max(1, min(min(SPLITK, div(K, 512)), div(div(SM_COUNT, CM), ceil_div(M, BM * CM) * ceil_div(N, BN))))))) block=(256) pdl=1 args=(C, part, M, N)
// @kl:launch gemm_skinny grid=(M <= SKINNY_M ? max(1, min(min(SKMAX, div(K, 64)), div(SM_COUNT, ceil_div(N, SBN)))) : 0, ceil_div(N, SBN)) block=((SBN / 64 + 1) * 128) smem=(1024 + max(max(2, div(div(220 * 1024, ceil_div(ceil_div(N, SBN), SM_COUNT)), (SBN + max(16, next_pow2(min(M, 128)))) * 128)) * (SBN + max(16, next_pow2(min(M, 128)))) * 128, max(16, next_pow2(min(M, 128))) * (SBN + 4) * 4)) cluster=(max(1, min(min(SKMAX, div(K, 64)), div(SM_COUNT, ceil_div(N, SBN)))), 1, 1) args=(tmW, tmX, C, M, N, K)
#include <cuda_bf16.h>

constexpr int BK = 64; // one 128-byte swizzle row of bf16
constexpr int CONSUMERS = BM / 64;
constexpr int THREADS = (CONSUMERS + 1) * 128;
// The narrow kernel's ring fills the shared memory of the wide one's (the launch line computes the same).
constexpr int NARROW_STAGES = (STAGES * (BM + BN) / (BM + 64)) < 8 ? STAGES * (BM + BN) / (BM + 64) : 8;

// The harness passes each @kl:tensormap as a CUtensorMap by value: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

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
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(inner), "r"(outer), "r"(smem_u32(bar))
                 : "memory");
}

// The same box into the same shared-memory offset of every block in ctaMask, each block's mbarrier at that offset
// counting the bytes.
__device__ __forceinline__ void tma_load_2d_multicast(
    void* dst, const TensorMap* map, int inner, int outer, unsigned long long* bar, unsigned short ctaMask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(inner), "r"(outer), "r"(smem_u32(bar)), "h"(ctaMask)
                 : "memory");
}

// Arrive on the mbarrier at the same offset in block `rank` of the cluster (this block's own when rank is its own).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned long long* bar, unsigned rank)
{
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_u32(bar)),
                 "r"(rank)
                 : "memory");
}

__device__ __forceinline__ void mbar_wait_cluster(unsigned long long* bar, unsigned parity)
{
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}

__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ float4 ld_shared_cluster_v4(unsigned addr)
{
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

__device__ __forceinline__ unsigned mapa_shared(unsigned addr, unsigned rank)
{
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

// The consumer warpgroups only (the producer's threads do not take part): named barrier 1.
__device__ __forceinline__ void consumers_sync()
{
    asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 128) : "memory");
}

// K-major operand in 128-byte swizzle: 8-row groups 1024 bytes apart (SBO), leading offset unused.
__device__ __forceinline__ unsigned long long smem_desc(const void* p)
{
    const unsigned long long addr = smem_u32(p);
    return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void wgmma_n64(float (&d)[32], unsigned long long da, unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_n128(float (&d)[64], unsigned long long da, unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_n256(float (&d)[128], unsigned long long da, unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db), "r"(accumulate));
}
template <int TBN>
__device__ __forceinline__ void wgmma_tile(float (&d)[TBN / 2], unsigned long long da, unsigned long long db, int accumulate)
{
    if constexpr (TBN == 64)
        wgmma_n64(d, da, db, accumulate);
    else if constexpr (TBN == 128)
        wgmma_n128(d, da, db, accumulate);
    else
        wgmma_n256(d, da, db, accumulate);
}

struct Work {
    int mt, nt, kBegin, kCount, split;
};

// Unit w of the cluster's walk; the CM blocks of a cluster take the CM vertically adjacent tiles of one unit.
template <int TBN>
__device__ __forceinline__ Work work_unit(int w, unsigned rank, int M, int N, int K, int splits)
{
    const int mTiles = (M + BM - 1) / BM, nTiles = (N + TBN - 1) / TBN;
    const int mGroups = (mTiles + CM - 1) / CM, tiles = mGroups * nTiles;
    const int tile = w % tiles, split = w / tiles;
    // Grouped raster: GROUP consecutive tiles along the major direction share their panel of the other operand.
    const int major = RASTER == 0 ? mGroups : nTiles, minor = RASTER == 0 ? nTiles : mGroups;
    const int perGroup = GROUP * minor, first = tile / perGroup * GROUP;
    const int rows = min(major - first, GROUP);
    const int a = first + (tile % perGroup) % rows, b = (tile % perGroup) / rows;
    Work u;
    u.mt = (RASTER == 0 ? a : b) * CM + static_cast<int>(rank);
    u.nt = RASTER == 0 ? b : a;
    const int kBlocks = K / BK, per = (kBlocks + splits - 1) / splits;
    u.kBegin = split * per;
    u.kCount = max(0, min(kBlocks, u.kBegin + per) - u.kBegin);
    u.split = split;
    return u;
}

// The split count of K: SPLITK, or with FIT >= 1 what the launch line chose, read back from the grid (a grid of
// CM * units when the units fit on the SMs, of CM * SMs otherwise, where the split is 1).
template <int TBN>
__device__ __forceinline__ int splits_of_grid(int M, int N)
{
    if (FIT == 0)
        return SPLITK;
    const int tiles = ((M + BM * CM - 1) / (BM * CM)) * ((N + TBN - 1) / TBN);
    return max(1, static_cast<int>(gridDim.x) / CM / tiles);
}

extern __shared__ unsigned char smem_raw[]; // both paths' dynamic shared memory

template <int TBN, int TSTAGES>
__device__ __forceinline__ void gemm_persistent(const TensorMap* tmA, const TensorMap* tmB,
    __nv_bfloat16* __restrict__ C, float* __restrict__ part, int* __restrict__ arrivals, int M, int N, int K)
{
    constexpr unsigned STAGE_BYTES = (BM + TBN) * BK * 2;
    __shared__ int lastSplit;
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    __nv_bfloat16* sA = reinterpret_cast<__nv_bfloat16*>(smem);
    __nv_bfloat16* sB = sA + TSTAGES * BM * BK;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sB + TSTAGES * TBN * BK);
    unsigned long long* empty = full + TSTAGES;
    const int splits = splits_of_grid<TBN>(M, N);

    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    // REDUCE=2: the splits of a tile are one cluster, block r of it the r-th split; FIT keeps one tile a cluster.
    const bool clusterSplit = REDUCE == 2 && splits > 1;
    const int group = clusterSplit ? splits : CM;
    const unsigned rank = CM > 1 ? cluster_rank() : 0, splitRank = clusterSplit ? cluster_rank() : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < TSTAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], CM * CONSUMERS * 4); // every consumer warp of every block of the cluster
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (CM > 1)
        cluster_sync(); // the partner's barriers exist before anything arrives on them
    else
        __syncthreads();

    const int mTiles = (M + BM - 1) / BM, nTiles = (N + TBN - 1) / TBN;
    const int tiles = ((mTiles + CM - 1) / CM) * nTiles;
    const int units = clusterSplit ? tiles : tiles * splits;
    const int cluster = blockIdx.x / group, clusters = gridDim.x / group;
    int stage = 0;
    unsigned phase = 0;
    if (wg == 0) {
#if REGSPLIT && BM == 128
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
#endif
        if (t == 0) {
            for (int w = cluster; w < units; w += clusters) {
                const Work u = work_unit<TBN>(w + splitRank * tiles, rank, M, N, K, splits);
                for (int kb = u.kBegin; kb < u.kBegin + u.kCount; ++kb) {
                    if (CM > 1)
                        mbar_wait_cluster(&empty[stage], phase ^ 1);
                    else
                        mbar_wait(&empty[stage], phase ^ 1);
                    mbar_expect_tx(&full[stage], STAGE_BYTES);
                    tma_load_2d(sA + stage * BM * BK, tmA, kb * BK, u.mt * BM, &full[stage]);
                    if (CM > 1)
                        tma_load_2d_multicast(sB + stage * TBN * BK + rank * (TBN / CM) * BK, tmB, kb * BK,
                            u.nt * TBN + rank * (TBN / CM), &full[stage], static_cast<unsigned short>((1u << CM) - 1));
                    else
                        tma_load_2d(sB + stage * TBN * BK, tmB, kb * BK, u.nt * TBN, &full[stage]);
                    if (++stage == TSTAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
        if (CM > 1)
            cluster_sync(); // the partner may still arrive on this block's barriers until it is done
        if (clusterSplit) { // the consumers' two: partial tiles written, partial tiles read
            cluster_sync();
            cluster_sync();
        }
        return;
    }
#if REGSPLIT && BM == 128
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
#endif
    const int c = wg - 1, warp = t / 32, lane = t % 32;
    // A stage is released by each consumer warp, to every block of the cluster that wrote into it.
    auto release = [&](int s) {
        if (lane == 0)
            for (unsigned r = 0; r < CM; ++r) {
                if (CM > 1)
                    mbar_arrive_cluster(&empty[s], r);
                else
                    mbar_arrive(&empty[s]);
            }
    };
    float acc[TBN / 2];
    for (int w = cluster; w < units; w += clusters) {
        const Work u = work_unit<TBN>(w + splitRank * tiles, rank, M, N, K, splits);
        int previous = -1;
        for (int i = 0; i < u.kCount; ++i) {
            mbar_wait(&full[stage], phase);
            const unsigned long long da = smem_desc(sA + stage * BM * BK + c * 64 * BK);
            const unsigned long long db = smem_desc(sB + stage * TBN * BK);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk)
                wgmma_tile<TBN>(acc, da + 2 * kk, db + 2 * kk, i > 0 || kk > 0); // +32 bytes per k16 step
            wgmma_commit();
            wgmma_wait<1>();
            if (previous >= 0)
                release(previous);
            previous = stage;
            if (++stage == TSTAGES) {
                stage = 0;
                phase ^= 1;
            }
        }
        wgmma_wait<0>();
        if (previous >= 0)
            release(previous);
        if (u.kCount == 0)
#pragma unroll
            for (int j = 0; j < TBN / 2; ++j)
                acc[j] = 0.f;
        // REDUCE=2: block r of the cluster owns column groups [qBegin, qEnd) of the tile (8 columns, one float4 of
        // each consumer thread, per group): it adds the partners' partials there and writes them to C.
        constexpr int kGroups = TBN / 8;
        const int qBegin = clusterSplit ? static_cast<int>(splitRank) * kGroups / splits : 0;
        const int qEnd = clusterSplit ? (static_cast<int>(splitRank) + 1) * kGroups / splits : kGroups;
        if (clusterSplit) {
            // The ring is idle (one unit per cluster): each block leaves there the groups its partners own, float4 q
            // of consumer thread i at q * CONSUMERS * 2048 + i * 16 (consecutive threads, consecutive 16 bytes), and
            // reads its own groups from every partner, so each block reads (S - 1) / S of one tile.
            const unsigned red = smem_u32(smem), lane4 = (c * 128 + t) * 16;
            consumers_sync(); // the other warpgroup's last wgmma may still read the stages this store covers
#pragma unroll
            for (int q = 0; q < kGroups; ++q)
                if (q < qBegin || q >= qEnd)
                    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(red + q * CONSUMERS * 2048 + lane4),
                                 "f"(acc[4 * q]), "f"(acc[4 * q + 1]), "f"(acc[4 * q + 2]), "f"(acc[4 * q + 3])
                                 : "memory");
            cluster_sync();
            for (int partner = 0; partner < splits; ++partner)
                if (partner != static_cast<int>(splitRank))
#pragma unroll
                    for (int q = 0; q < kGroups; ++q)
                        if (q >= qBegin && q < qEnd) {
                            const float4 v = ld_shared_cluster_v4(mapa_shared(red + q * CONSUMERS * 2048 + lane4, partner));
                            acc[4 * q] += v.x;
                            acc[4 * q + 1] += v.y;
                            acc[4 * q + 2] += v.z;
                            acc[4 * q + 3] += v.w;
                        }
            cluster_sync(); // every block has read its groups before any partner exits or takes another unit
        }
        if (u.mt * BM >= M)
            continue; // the second block of a cluster past the last row tile: it only loaded its partner's B half
        // Accumulator layout of m64nNk16: per 8 columns, rows warp*16 + lane/4 (+8), columns (lane%4)*2 (+1).
        const int row0 = u.mt * BM + c * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < TBN / 8; ++j) {
            const int col = u.nt * TBN + j * 8 + (lane % 4) * 2;
            if (col >= N || j < qBegin || j >= qEnd)
                continue;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + h * 8;
                if (row >= M)
                    continue;
                const float x = acc[j * 4 + h * 2], y = acc[j * 4 + h * 2 + 1];
                if (splits == 1 || clusterSplit)
                    *reinterpret_cast<__nv_bfloat162*>(C + (long long)row * N + col) = __floats2bfloat162_rn(x, y);
                else
                    *reinterpret_cast<float2*>(part + ((long long)u.split * M + row) * N + col) = make_float2(x, y);
            }
        }
        if (splits == 1 || REDUCE != 1)
            continue;
        // In-kernel reduction: the split whose arrival completes the tile's count sums every split's partials.
        __threadfence();
        consumers_sync();
        if (c == 0 && t == 0)
            lastSplit = atomicAdd(&arrivals[u.mt * nTiles + u.nt], 1) == splits - 1;
        consumers_sync();
        if (!lastSplit)
            continue;
        __threadfence();
#pragma unroll
        for (int j = 0; j < TBN / 8; ++j) {
            const int col = u.nt * TBN + j * 8 + (lane % 4) * 2;
            if (col >= N)
                continue;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + h * 8;
                if (row >= M)
                    continue;
                float x = acc[j * 4 + h * 2], y = acc[j * 4 + h * 2 + 1];
                for (int s = 0; s < splits; ++s)
                    if (s != u.split) {
                        const float2 v = __ldcg(reinterpret_cast<const float2*>(part + ((long long)s * M + row) * N + col));
                        x += v.x;
                        y += v.y;
                    }
                *reinterpret_cast<__nv_bfloat162*>(C + (long long)row * N + col) = __floats2bfloat162_rn(x, y);
            }
        }
    }
    if (CM > 1)
        cluster_sync();
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    gemm_tma_wgmma(const __grid_constant__ TensorMap tmA, const __grid_constant__ TensorMap tmB,
                   __nv_bfloat16* __restrict__ C, float* __restrict__ part, int* __restrict__ arrivals, int M, int N,
                   int K)
{
    gemm_persistent<BN, STAGES>(&tmA, &tmB, C, part, arrivals, M, N, K);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    gemm_tma_wgmma_narrow(const __grid_constant__ TensorMap tmA, const __grid_constant__ TensorMap tmB64,
                          __nv_bfloat16* __restrict__ C, float* __restrict__ part, int* __restrict__ arrivals, int M,
                          int N, int K)
{
    gemm_persistent<64, NARROW_STAGES>(&tmA, &tmB64, C, part, arrivals, M, N, K);
}

extern "C" __global__ void __launch_bounds__(256)
    gemm_splitk_reduce(__nv_bfloat16* __restrict__ C, const float* __restrict__ part, int M, int N)
{
    // Launched with pdl=1: it may start while the GEMM drains; the partials are complete after the wait.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int splits = gridDim.y; // the launch line's split count; the y-th slice of the blocks sums the y-th part
    if (splits == 1)
        return;
    const long long count = (long long)M * N;
    const long long i = (((long long)blockIdx.y * gridDim.x + blockIdx.x) * 256 + threadIdx.x) * 4;
    if (i >= count)
        return;
    float4 sum = *reinterpret_cast<const float4*>(part + i);
    for (int s = 1; s < splits; ++s) {
        const float4 v = *reinterpret_cast<const float4*>(part + s * count + i);
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
    }
    *reinterpret_cast<__nv_bfloat162*>(C + i) = __floats2bfloat162_rn(sum.x, sum.y);
    *reinterpret_cast<__nv_bfloat162*>(C + i + 2) = __floats2bfloat162_rn(sum.z, sum.w);
}

// ---- Skinny path (M <= SKINNY_M <= 128): one launch, no workspace, no per-shape parameters -------------------------------------
// Swap-AB: the weights are the wgmma M side (consumer warpgroup c owns rows c*64.. of the block's SBN weight rows) and
// the tokens its N side, n = the smallest of 16, 32, 64, 128 holding M, chosen at run time, so M = 16 computes no
// padding rows. Block (r, nt) streams weight rows [nt*SBN, +SBN) over the r-th of S slices of K; the S blocks of a
// column tile form a cluster that sums its fp32 partials through distributed shared memory: each block leaves its
// [tokens x SBN] tile in its own shared memory, and after a cluster barrier block r adds every block's share r (in
// rank order, so the bits do not depend on timing) and stores it as bf16. S comes from the shape in the launch line
// (enough blocks to cover the SMs once, at most SKMAX and one 64-wide k-block each), as does the ring's depth (as
// many stages of this M's token tile as fit 220 KiB, or half of it where there are more column tiles than SMs and
// two blocks share an SM; two at least), which the kernel reads back from its dynamic shared memory size.
constexpr int SKINNY_CONSUMERS = SBN / 64;
constexpr int SKINNY_THREADS = (SKINNY_CONSUMERS + 1) * 128;
constexpr int SKINNY_MAX_STAGES = 32; // above what 220 KiB holds even at SBN = 64, M <= 16 (22)
constexpr int TOKEN_BOX = 16; // rows of A per copy: a 16-token tile loads no rows past the 16th
constexpr int RED_STRIDE = SBN + 4; // floats per token row of the reduction tile: the fragment stores hit 32 banks

__device__ __forceinline__ void tma_load_2d_hint(
    void* dst, const TensorMap* map, int inner, int outer, unsigned long long* bar, unsigned long long policy)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(inner), "r"(outer), "r"(smem_u32(bar)), "l"(policy)
                 : "memory");
}

// Weights are read once (evict first); the token rows are read by every column tile (evict last).
__device__ __forceinline__ unsigned long long l2_policy_evict_first()
{
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ unsigned long long l2_policy_evict_last()
{
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}

__device__ __forceinline__ unsigned dynamic_smem_bytes()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void skinny_consumers_sync()
{
    asm volatile("bar.sync 1, %0;" ::"n"(SKINNY_CONSUMERS * 128) : "memory");
}

__device__ __forceinline__ void cluster_arrive()
{
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}

// An arrival that orders nothing (a release here waits for this thread's global stores: MEMBAR.GPU).
__device__ __forceinline__ void cluster_arrive_relaxed()
{
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait()
{
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}



__device__ __forceinline__ void wgmma_n16(float (&d)[8], unsigned long long da, unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_n32(float (&d)[16], unsigned long long da, unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db), "r"(accumulate));
}

template <int TN>
__device__ __forceinline__ void wgmma_tokens(float (&d)[TN / 2], unsigned long long da, unsigned long long db, int accumulate)
{
    if constexpr (TN == 16)
        wgmma_n16(d, da, db, accumulate);
    else if constexpr (TN == 32)
        wgmma_n32(d, da, db, accumulate);
    else if constexpr (TN == 64)
        wgmma_n64(d, da, db, accumulate);
    else
        wgmma_n128(d, da, db, accumulate);
}

// The ring as both sides see it: stage s holds SBN weight rows, then tn token rows, 64 k each (128-byte rows).
struct SkinnyRing {
    unsigned char* base;
    unsigned stageBytes;
    int stages;
    unsigned long long* full;
    unsigned long long* empty;
    __device__ unsigned char* weights(int s) const { return base + s * stageBytes; }
    __device__ unsigned char* tokens(int s) const { return base + s * stageBytes + SBN * BK * 2; }
};

// Consumer warpgroup c: its 64 weight rows times the TN token columns over kCount k-blocks, then its fragment of
// the fp32 partial tile into red[token][weight row] (tokens past M are not written: nobody reads them).
template <int TN>
__device__ __forceinline__ void skinny_consume(const SkinnyRing& ring, int kCount, int c, float* red, int M)
{
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    float acc[TN / 2];
#pragma unroll
    for (int j = 0; j < TN / 2; ++j)
        acc[j] = 0.f;
    int stage = 0, previous = -1;
    unsigned phase = 0;
    for (int i = 0; i < kCount; ++i) {
        mbar_wait(&ring.full[stage], phase);
        const unsigned long long da = smem_desc(ring.weights(stage) + c * 64 * BK * 2);
        const unsigned long long db = smem_desc(ring.tokens(stage));
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
            wgmma_tokens<TN>(acc, da + 2 * kk, db + 2 * kk, i > 0 || kk > 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (previous >= 0 && lane == 0)
            mbar_arrive(&ring.empty[previous]);
        previous = stage;
        if (++stage == ring.stages) {
            stage = 0;
            phase ^= 1;
        }
    }
    wgmma_wait<0>();
    // red overlays the ring: every consumer's MMAs have read their last stage before anyone writes it.
    skinny_consumers_sync();
    // Fragment of m64nTNk16 (weights x tokens): per 8 tokens j, weight rows warp*16 + lane/4 (+8), tokens
    // j*8 + (lane%4)*2 (+1).
    const int row = c * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < TN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int token = j * 8 + (lane % 4) * 2 + e;
            if (token < M) {
                red[token * RED_STRIDE + row] = acc[j * 4 + e];
                red[token * RED_STRIDE + row + 8] = acc[j * 4 + 2 + e];
            }
        }
}

// The smallest token tile holding M, from 16 up: the instantiation of skinny_consume that the launch line sized.
template <int TN>
__device__ __forceinline__ void skinny_consume_for(const SkinnyRing& ring, int kCount, int c, float* red, int M)
{
    if constexpr (TN < 128)
        if (M > TN) {
            skinny_consume_for<TN * 2>(ring, kCount, c, red, M);
            return;
        }
    skinny_consume<TN>(ring, kCount, c, red, M);
}

extern "C" __global__ void __launch_bounds__(SKINNY_THREADS, 1)
    gemm_skinny(const __grid_constant__ TensorMap tmW, const __grid_constant__ TensorMap tmX,
                __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    __shared__ unsigned long long full[SKINNY_MAX_STAGES], empty[SKINNY_MAX_STAGES];
    // Aligned by pointer arithmetic, so the compiler still knows red[] is shared memory (st.shared, not generic).
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    const int tn = max(16, 1 << (32 - __clz(M - 1))); // next power of two, at least 16
    SkinnyRing ring;
    ring.base = smem;
    ring.stageBytes = (SBN + tn) * BK * 2;
    ring.stages = min(SKINNY_MAX_STAGES, static_cast<int>((dynamic_smem_bytes() - 1024) / ring.stageBytes));
    ring.full = full;
    ring.empty = empty;
    float* red = reinterpret_cast<float*>(smem);

    // The cluster is (S, 1, 1) over grid (S, column tiles): block x is split x of K and its rank in the cluster.
    const int splits = gridDim.x, split = blockIdx.x, nt = blockIdx.y;
    const int kBlocks = K / BK, per = (kBlocks + splits - 1) / splits;
    const int kBegin = split * per, kCount = max(0, min(kBlocks, kBegin + per) - kBegin);
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < ring.stages; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], SKINNY_CONSUMERS * 4); // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        if (threadIdx.x == 0) {
            asm volatile("prefetch.tensormap [%0];" ::"l"(&tmW) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(&tmX) : "memory");
            const unsigned long long streamed = l2_policy_evict_first(), reused = l2_policy_evict_last();
            const int boxes = (M + TOKEN_BOX - 1) / TOKEN_BOX;
            const unsigned bytes = SBN * BK * 2 + boxes * TOKEN_BOX * BK * 2;
            int stage = 0;
            unsigned phase = 0;
            for (int i = 0; i < kCount; ++i) {
                const int k = (kBegin + i) * BK;
                mbar_wait(&empty[stage], phase ^ 1);
                mbar_expect_tx(&full[stage], bytes);
                tma_load_2d_hint(ring.weights(stage), &tmW, k, nt * SBN, &full[stage], streamed);
                for (int b = 0; b < boxes; ++b)
                    tma_load_2d_hint(ring.tokens(stage) + b * TOKEN_BOX * BK * 2, &tmX, k, b * TOKEN_BOX, &full[stage], reused);
                if (++stage == ring.stages) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
    } else {
        skinny_consume_for<16>(ring, kCount, wg - 1, red, M);
    }

    // Block `split` sums share `split` of the tile (runs of SKINNY_THREADS float4s along the weight rows) over the
    // cluster's blocks in rank order, and stores it.
    const unsigned redAddr = smem_u32(red);
    if (splits > 1) {
        cluster_arrive();
        cluster_wait(); // every block's partial tile is written and visible
    } else {
        __syncthreads();
    }
    constexpr int QUADS = SBN / 4; // float4s per token row
    const int quads = M * QUADS;
    for (int q = split * SKINNY_THREADS + threadIdx.x; q < quads; q += splits * SKINNY_THREADS) {
        const int token = q / QUADS, col = (q % QUADS) * 4;
        if (nt * SBN + col >= N)
            continue;
        const unsigned offset = (token * RED_STRIDE + col) * 4;
        float4 sum = ld_shared_cluster_v4(splits > 1 ? mapa_shared(redAddr + offset, 0) : redAddr + offset);
        for (int r = 1; r < splits; ++r) {
            const float4 v = ld_shared_cluster_v4(mapa_shared(redAddr + offset, r));
            sum.x += v.x;
            sum.y += v.y;
            sum.z += v.z;
            sum.w += v.w;
        }
        const __nv_bfloat162 lo = __floats2bfloat162_rn(sum.x, sum.y), hi = __floats2bfloat162_rn(sum.z, sum.w);
        uint2 packed;
        packed.x = *reinterpret_cast<const unsigned*>(&lo);
        packed.y = *reinterpret_cast<const unsigned*>(&hi);
        *reinterpret_cast<uint2*>(C + (long long)token * N + nt * SBN + col) = packed;
    }
    if (splits > 1) {
        cluster_arrive_relaxed(); // this block's loads of the others' tiles have returned; it waits for theirs
        cluster_wait(); // before it exits
    }
}
