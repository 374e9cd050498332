// Template (sm_90a; Blackwell takes the mma.sync one, template_mma_sync.cu): sparse MLA decode (DeepSeek V3.2's DSA
// attention) on Hopper's warpgroup MMA, the wgmma kernel of
// bench/attention/mla_hypothesis/shared_kv_wgmma.cu over the latent rows the top-k list selects. A CTA takes 64 query
// rows (heads) of one (sequence, query row j) and one split of j's list; the two CTAs of a (sequence, j) are adjacent
// in blockIdx.x, so each gathered row comes from HBM once and from L2 for the other.
// Physics: 2176 FLOP per selected row and head, 1152 bytes per row: at 128 heads, 242 FLOP per byte, compute-bound
// on an H200, so the goal is tensor-core throughput with each selected row read once per query row.
// The producer warpgroup first compacts j's TOPK slots into a list of cache rows in shared memory (-1 slots dropped,
// a scan over its 128 threads; positions through block_table) while Q's copies are in flight, then gathers blocks of
// 64 listed rows with 16-byte cp.async (no TMA gather on sm_90) in the 128-byte swizzle the wgmma descriptors read:
// all 128 threads on every block, a side (left = boxes 0..3, right = 4..8) at a time in the order the consumers free
// them, a row's boxes back to back with a 256-byte L2 fetch; rows past the split are zero-filled, their scores
// -inf. The 128 threads arrive on the side's "ready" mbarrier through cp.async.mbarrier.arrive.noinc. (Round 8's
// producer, 64 threads per buffer going box by box with a barrier per box, reached 278-310 TFLOP/s; this one 408-469,
// and 4-5% less with each block's rows also prefetched into L2 two blocks ahead: round 10.) The consumers are
// the dense kernel's: two warpgroups, each owning 256 of O's 512 columns, computing S of alternate blocks and
// exchanging the running max and P (over the block's rope box) through shared memory and named barriers (the dense
// file explains the schedule). A fence.proxy.async after each side's wait hands the cp.async (generic proxy) data to
// wgmma (async proxy).
// Shared memory: Q 72 KB, two buffers of 72 KB, 1 KB of control, the 8 KB list: 226 KB with the alignment slack.
// Splits: WAVES x SM_COUNT / (B x SQ x 2) per row block, at least one, at most 64 and one per block of 64 rows
// (SM_COUNT capped at 256 for the workspace). One split writes the output and the merge is not launched; otherwise
// each writes an unnormalised partial (O, m, l), an empty split the neutral one (m = -inf, l = 0). A row with no
// listed position has l = 0 everywhere and gives zeros.
#include <cuda_bf16.h>
// @kl:param WAVES = 1 in [1, 2, 3, 4]
// @kl:param L2FETCH = 256 in [0, 128, 256]
// @kl:constraint ARCH == 90
// @kl:workspace partials bytes=(16 + B * SQ * HQ * min(min(max(div(WAVES * 256, B * SQ * 2), 1), 64), ceil_div(min(TOPK, MAXP * PS), 64)) * (DV + 2) * 4) init=poison
// @kl:launch sparse_mla_decode_wgmma grid=(B * SQ * 2, min(min(max(div(WAVES * min(SM_COUNT, 256), B * SQ * 2), 1), 64), ceil_div(min(TOPK, MAXP * PS), 64))) block=(384) smem=(1024 + 3 * 73728 + 1024 + TOPK * 4) args=(partials, out, q, kv_cache, block_table, indices, SQ, MAXP, scale)
// @kl:launch sparse_mla_decode_wgmma_merge grid=(min(min(max(div(WAVES * min(SM_COUNT, 256), B * SQ * 2), 1), 64), ceil_div(min(TOPK, MAXP * PS), 64)) > 1 ? B * SQ * HQ : 0) block=(128) smem=0 args=(out, partials)

constexpr bool kKvByTma = false; // rows by cp.async (generic proxy), zero-filled past the split

constexpr int kTopK = 2048;

constexpr int kDK = 576, kDV = 512, kPS = 64;
constexpr int kRows = 64; // query rows (heads) of a CTA: one wgmma M
constexpr int kBN = 64; // tokens of a KV block
constexpr int kBoxBytes = 64 * 128; // 64 rows of 64 bf16: one 128-byte swizzle row each
constexpr int kBoxes = kDK / 64; // 9: latent 0..7, rope 8
constexpr int kLeftBoxes = 4; // a block's left half, boxes 0..3, holds V's columns 0..255; the right half 4..8
constexpr int kTileBytes = kBoxes * kBoxBytes;
constexpr int kRopeBox = kBoxes - 1; // where a block's P goes once its S is done
constexpr int kHalfV = kDV / 2; // O columns of a consumer warpgroup
constexpr int kThreads = 384; // consumer warpgroups 0 and 1, producer warpgroup 2
constexpr int kConsumers = 256;

// Named barriers (0 is __syncthreads): the consumer warpgroups' handoffs, then the sparse producer's scan and its list
// handoff to the consumers.
enum NamedBarrier : int { kEvenMaxReady = 1, kOddMaxReady, kEvenPReady, kOddPReady, kSumsReady, kListReady, kScan };

struct Control {
    float rowMax[kRows]; // the running max after the latest softmax, handed from one warpgroup to the other
    float rowSum[2][kRows]; // each warpgroup's l, added in the epilogue
    unsigned long long qReady;
    unsigned long long ready[2][2]; // [buffer][side: left, right]: the producer's copies landed
    unsigned long long released[2][2]; // [buffer][side: left, right]: its readers are done with it
    int listed; // sparse: the listed positions of the row's top-k
    int warpTotals[4];
};
static_assert(sizeof(Control) <= 1024, "the control block fills the 1 KB after the tiles");

__device__ __forceinline__ float negInf()
{
    return __int_as_float(0xff800000u);
}

__device__ __forceinline__ unsigned sharedAddress(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ float exp2Approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned packBf16(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
}

// Byte offset of 16-byte chunk c of row r within a box: the 128-byte swizzle XORs the chunk with r % 8.
__device__ __forceinline__ unsigned swizzled(int r, int c)
{
    return r * 128 + ((c ^ (r & 7)) << 4);
}

__device__ __forceinline__ void mbarInit(unsigned long long* bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sharedAddress(bar)), "r"(count));
}

__device__ __forceinline__ bool mbarTryWait(unsigned bar, unsigned parity)
{
    unsigned done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return done != 0;
}

// A build outside the harness may define MLA_STALL_CHECK(spins, bar, parity) to report a wait that never ends.
#ifndef MLA_STALL_CHECK
#define MLA_STALL_CHECK(spins, bar, parity)
#endif

// Waits for the completion of the barrier's phase of this parity (a fresh barrier counts phase 1 as complete).
__device__ __forceinline__ void mbarWait(const unsigned long long* bar, unsigned parity)
{
    const unsigned at = sharedAddress(bar);
    for (unsigned spins = 0; !mbarTryWait(at, parity); ++spins)
        MLA_STALL_CHECK(spins, at, parity);
}

__device__ __forceinline__ void mbarArrive(unsigned long long* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sharedAddress(bar)) : "memory");
}

__device__ __forceinline__ void mbarArriveExpectBytes(unsigned long long* bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sharedAddress(bar)), "r"(bytes)
                 : "memory");
}

// One arrival on bar once every cp.async this thread issued so far has landed (counted among the expected ones).
__device__ __forceinline__ void cpAsyncArrive(unsigned long long* bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(sharedAddress(bar)) : "memory");
}

__device__ __forceinline__ void copyAsync16(unsigned dst, const void* src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}

// The same with L2 fetching the aligned L2FETCH bytes around each access (0: no hint), so a gathered row's next
// pieces, copied right after, hit L2. A 1152-byte row is 256-aligned only every other row: 256 fetches up to 11%
// more bytes than the rows hold, 128 none, but leaves more of each row to separate DRAM requests.
__device__ __forceinline__ void copyAsync16Prefetch(unsigned dst, const void* src, bool valid)
{
    if constexpr (L2FETCH == 256)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                     "r"(valid ? 16 : 0)
                     : "memory");
    else if constexpr (L2FETCH == 128)
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                     "r"(valid ? 16 : 0)
                     : "memory");
    else
        copyAsync16(dst, src, valid);
}

__device__ __forceinline__ void barrierArrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void barrierSync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Orders this thread's generic-proxy shared-memory accesses before its later async-proxy ones (wgmma, TMA).
__device__ __forceinline__ void fenceAsyncShared()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// wgmma's shared-memory matrix descriptor, 128-byte swizzle; byte offsets in 16-byte units.
__device__ __forceinline__ unsigned long long matrixDescriptor(unsigned addr, unsigned leading, unsigned stride)
{
    return ((addr & 0x3FFFF) >> 4) | (static_cast<unsigned long long>(leading >> 4) << 16)
        | (static_cast<unsigned long long>(stride >> 4) << 32) | (1ull << 62);
}

// K-major operand (Q, K, P) in a box: rows of 128 bytes, 8-row groups 1024 bytes apart; a 16-wide k step is 32 bytes
// further along the row.
__device__ __forceinline__ unsigned long long kMajorDescriptor(unsigned addr)
{
    return matrixDescriptor(addr, 16, 1024);
}

// V as an MN-major B operand: a token's 64 columns in one box row, 8-token groups 1024 bytes apart, the next 64
// columns a box further; a 16-token k step is 2048 bytes further.
__device__ __forceinline__ unsigned long long valuesDescriptor(unsigned addr)
{
    return matrixDescriptor(addr, kBoxBytes, 1024);
}

__device__ __forceinline__ void wgmmaFence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmmaCommit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int N> __device__ __forceinline__ void wgmmaWait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Ties registers an asynchronous wgmma writes or reads to this point, after the wait that completes it: the compiler
// may neither read them earlier nor reuse them before.
template <int N> __device__ __forceinline__ void pinRegisters(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(r[i])::"memory");
}

template <int N, int M> __device__ __forceinline__ void pinRegisters(unsigned (&r)[N][M])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < M; ++j)
            asm volatile("" : "+r"(r[i][j])::"memory");
}

// S (+)= Q K^T over 16 dims: m64n64k16, Q and K K-major in shared memory; accumulate = 0 starts from zero.
__device__ __forceinline__ void wgmmaScores(float (&d)[32], unsigned long long q, unsigned long long k, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(q), "l"(k), "r"(accumulate));
}

// O += P V over 16 tokens: m64n256k16, P in registers (the A fragment), V MN-major in shared memory (transposed).
__device__ __forceinline__ void wgmmaValuesFromRegisters(float (&d)[128], const unsigned (&p)[4], unsigned long long v)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(v));
}

// O += P V over 16 tokens with P K-major in shared memory.
__device__ __forceinline__ void wgmmaValuesFromShared(float (&d)[128], unsigned long long p, unsigned long long v)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(p), "l"(v));
}

// The MMA sequences of the consumers (free functions so that a test driver can run exactly these): thread t of a
// warpgroup holds accumulator rows t / 32 * 16 + t % 32 / 4 (+ 8), columns (i >> 2) * 8 + t % 4 * 2 + (i & 1).

// S (+)= Q K^T over one box (64 of the 576 dims) in 4 wgmma steps; box 0 starts S from zero.
__device__ __forceinline__ void issueScoresBox(float (&s)[32], unsigned q, unsigned kv, int box)
{
    const unsigned long long qd = kMajorDescriptor(q + box * kBoxBytes), kd = kMajorDescriptor(kv + box * kBoxBytes);
#pragma unroll
    for (int k = 0; k < 4; ++k)
        wgmmaScores(s, qd + ((k * 32) >> 4), kd + ((k * 32) >> 4), box > 0 || k > 0);
}

// S = Q K^T over all 9 boxes as one wgmma group (the consumers wait for each box in between instead).
__device__ __forceinline__ void issueScores(float (&s)[32], unsigned q, unsigned kv)
{
    wgmmaFence();
#pragma unroll
    for (int box = 0; box < kBoxes; ++box)
        issueScoresBox(s, q, kv, box);
    wgmmaCommit();
}

// P (s times a per-row factor) as bf16 A fragments: p[k] covers tokens 16 k + t % 4 * 2 (+1, +8, +9) of both rows.
__device__ __forceinline__ void packP(unsigned (&p)[4][4], const float (&s)[32], const float (&factor)[2])
{
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = (2 * k + e) * 4 + 2 * h;
                p[k][2 * e + h] = packBf16(s[i] * factor[h], s[i + 1] * factor[h]);
            }
}

// P into a box (64 x 64 bf16, K-major, swizzled) for the other warpgroup's wgmma.
__device__ __forceinline__ void storeP(unsigned box, const unsigned (&p)[4][4])
{
    const int t = threadIdx.x % 128, row0 = t / 32 * 16 + t % 32 / 4;
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(box + swizzled(row0 + 8 * h, c) + t % 4 * 4),
                         "r"(p[c / 2][2 * (c % 2) + h])
                         : "memory");
}

// O += P V over 256 columns of V (4 boxes from `v`) and the block's 64 tokens: P from registers, or from a box.
__device__ __forceinline__ void issueValuesFromRegisters(float (&o)[128], const unsigned (&p)[4][4], unsigned v)
{
    const unsigned long long vd = valuesDescriptor(v);
    wgmmaFence();
#pragma unroll
    for (int k = 0; k < 4; ++k)
        wgmmaValuesFromRegisters(o, p[k], vd + ((k * 2048) >> 4));
    wgmmaCommit();
}

__device__ __forceinline__ void issueValuesFromShared(float (&o)[128], unsigned pBox, unsigned v)
{
    const unsigned long long vd = valuesDescriptor(v), pd = kMajorDescriptor(pBox);
    wgmmaFence();
#pragma unroll
    for (int k = 0; k < 4; ++k)
        wgmmaValuesFromShared(o, pd + ((k * 32) >> 4), vd + ((k * 2048) >> 4));
    wgmmaCommit();
}

// Where a consumer warpgroup's CTA works: shared memory, its blocks [0, blocks) of tokens [tBegin, tEnd), its rows.
struct Work {
    unsigned q; // shared address of Q's tile; the KV buffers follow
    Control* control;
    int blocks, tBegin, tEnd;
    long long rowBase; // the CTA's first query row (b, j, head)
    int split, splits;
    float scaleLog2;
};

__device__ __forceinline__ unsigned bufferAddress(const Work& w, int buffer)
{
    return w.q + (1 + buffer) * kTileBytes;
}

// The consumer warpgroups (wg 0: even blocks, V columns 0..255; wg 1: odd blocks, columns 256..511), then the
// epilogue: the output (one split) or the unnormalised partial.
__device__ __forceinline__ void consume(const Work& w, int wg, float* partials, __nv_bfloat16* out)
{
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32, quad = lane % 4;
    const int row0 = warp * 16 + lane / 4; // accumulator rows row0 and row0 + 8 (index bit 1 of an element)
    Control* ctl = w.control;
    float o[128]; // O's 64 x 256: element i at row row0 + 8 ((i >> 1) & 1), column (i >> 2) * 8 + quad * 2 + (i & 1)
    float s[32]; // S (then P in fp32) of 64 x 64, the same layout
    unsigned p[4][4]; // P as bf16 A fragments, one per 16 tokens
    float m[2] = { negInf(), negInf() }, l[2] = { 0.f, 0.f }; // per row: the max O and l are kept at, the sum
#pragma unroll
    for (int i = 0; i < 128; ++i)
        o[i] = 0.f;

    // S (+)= Q K^T over boxes [first, last), one side of the block in `buffer`, as one wgmma group once it landed.
    auto scores = [&](int buffer, int first, int last, unsigned parity) {
        mbarWait(&ctl->ready[buffer][first == 0 ? 0 : 1], parity);
        fenceAsyncShared(); // cp.async writes through the generic proxy; wgmma reads through the async one
        wgmmaFence();
#pragma unroll
        for (int box = first; box < last; ++box)
            issueScoresBox(s, w.q, bufferAddress(w, buffer), box);
        wgmmaCommit();
    };
    // Scores of tokens at or past `valid` (block-relative) become -inf.
    auto mask = [&](int valid) {
        if (valid >= kBN)
            return;
#pragma unroll
        for (int i = 0; i < 32; ++i)
            if ((i >> 2) * 8 + quad * 2 + (i & 1) >= valid)
                s[i] = negInf();
    };
    // The V rows of tokens at or past `valid` zeroed: P is 0 there, but 0 x NaN is not.
    auto zeroValuesPast = [&](int buffer, int valid) {
        const unsigned base = bufferAddress(w, buffer);
        for (int i = t; i < (kBN - valid) * 64; i += 128) {
            const int r = valid + i / 64, c = i % 64; // box c / 8, chunk c % 8 (a whole row: the swizzle is moot)
            asm volatile(
                "st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(base + (c / 8) * kBoxBytes + r * 128 + (c % 8) * 16),
                "r"(0)
                : "memory");
        }
        fenceAsyncShared();
    };
    auto rescale = [&](const float(&factor)[2]) {
#pragma unroll
        for (int i = 0; i < 128; ++i)
            o[i] *= factor[(i >> 1) & 1];
        l[0] *= factor[0];
        l[1] *= factor[1];
    };
    // Online softmax of s against the running max `previous`: the new max, P = exp2(S scale - max) in s and the row
    // sums; O and l rescaled from the max they were kept at.
    auto softmax = [&](const float(&previous)[2]) {
        float factor[2], sum[2] = { 0.f, 0.f };
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float top = negInf();
#pragma unroll
            for (int i = 2 * h; i < 32; i += 4)
                top = fmaxf(top, fmaxf(s[i], s[i + 1]));
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
            const float mNew = fmaxf(previous[h], top * w.scaleLog2);
            const float base = mNew == negInf() ? 0.f : mNew; // no token yet: exp2(-inf - 0) = 0, not NaN
            factor[h] = exp2Approx(m[h] - base);
            m[h] = mNew;
#pragma unroll
            for (int i = 2 * h; i < 32; i += 4) {
                s[i] = exp2Approx(fmaf(s[i], w.scaleLog2, -base));
                s[i + 1] = exp2Approx(fmaf(s[i + 1], w.scaleLog2, -base));
                sum[h] += s[i] + s[i + 1];
            }
        }
        rescale(factor);
        l[0] += sum[0];
        l[1] += sum[1];
    };
    auto storeMax = [&]() {
        if (quad == 0) {
            ctl->rowMax[row0] = m[0];
            ctl->rowMax[row0 + 8] = m[1];
        }
    };
    // This warpgroup's 256 columns of V in `buffer`.
    auto values = [&](int buffer) { return bufferAddress(w, buffer) + wg * kLeftBoxes * kBoxBytes; };
    auto ropeBox = [&](int buffer) { return bufferAddress(w, buffer) + kRopeBox * kBoxBytes; };
    const float one[2] = { 1.f, 1.f };

    if (w.blocks > 0) {
        mbarWait(&ctl->qReady, 0);
        fenceAsyncShared(); // Q came by cp.async
    }
    if (wg == 0) {
        if (w.blocks > 0) {
            scores(0, 0, kLeftBoxes, 0);
            scores(0, kLeftBoxes, kBoxes, 0);
            wgmmaWait<0>();
            pinRegisters(s);
        }
        for (int pair = 0, blk = 0; blk < w.blocks; blk += 2, ++pair) {
            const bool odd = blk + 1 < w.blocks;
            const int valid = w.tEnd - (w.tBegin + blk * kBN);
            mask(valid);
            if (kKvByTma && valid < kBN)
                zeroValuesPast(0, valid);
            const float previous[2] = { m[0], m[1] }; // the max after the previous odd block
            softmax(previous);
            storeMax();
            barrierArrive(kEvenMaxReady, kConsumers);
            packP(p, s, one);
            issueValuesFromRegisters(o, p, values(0));
            wgmmaWait<0>();
            pinRegisters(o);
            pinRegisters(p);
            mbarArrive(&ctl->released[0][0]);
            // The odd block's max: P0, O and l move to it.
            barrierSync(kOddMaxReady, kConsumers);
            float factor[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float mOdd = ctl->rowMax[row0 + 8 * h];
                factor[h] = exp2Approx(m[h] - (mOdd == negInf() ? 0.f : mOdd));
                m[h] = mOdd;
            }
            packP(p, s, factor);
            storeP(ropeBox(0), p);
            fenceAsyncShared();
            barrierArrive(kEvenPReady, kConsumers);
            barrierSync(kOddPReady, kConsumers);
            rescale(factor);
            if (odd)
                issueValuesFromShared(o, ropeBox(1), values(1));
            if (blk + 2 < w.blocks) { // the next even block's S runs under this P V
                scores(0, 0, kLeftBoxes, (pair + 1) & 1);
                wgmmaWait<1>();
                pinRegisters(o);
                if (odd) {
                    mbarArrive(&ctl->released[1][0]);
                    mbarArrive(&ctl->released[1][1]);
                }
                scores(0, kLeftBoxes, kBoxes, (pair + 1) & 1);
                wgmmaWait<0>();
                pinRegisters(s);
            } else {
                wgmmaWait<0>();
                pinRegisters(o);
                if (odd) {
                    mbarArrive(&ctl->released[1][0]);
                    mbarArrive(&ctl->released[1][1]);
                }
            }
        }
    } else {
        for (int pair = 0, blk = 0; blk < w.blocks; blk += 2, ++pair) {
            const bool odd = blk + 1 < w.blocks;
            if (odd) {
                scores(1, 0, kLeftBoxes, pair & 1);
                scores(1, kLeftBoxes, kBoxes, pair & 1);
                wgmmaWait<0>();
                pinRegisters(s);
                const int valid = w.tEnd - (w.tBegin + (blk + 1) * kBN);
                mask(valid);
                if (kKvByTma && valid < kBN)
                    zeroValuesPast(1, valid);
            }
            barrierSync(kEvenMaxReady, kConsumers);
            const float previous[2] = { ctl->rowMax[row0], ctl->rowMax[row0 + 8] };
            if (odd) {
                softmax(previous);
                __syncwarp(); // a row's four lanes have read its max before it is overwritten
                storeMax();
            } else {
                float factor[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    factor[h] = exp2Approx(m[h] - (previous[h] == negInf() ? 0.f : previous[h]));
                    m[h] = previous[h];
                }
                rescale(factor);
            }
            barrierArrive(kOddMaxReady, kConsumers);
            if (odd) {
                packP(p, s, one);
                issueValuesFromRegisters(o, p, values(1));
                storeP(ropeBox(1), p);
            }
            barrierSync(kEvenPReady, kConsumers);
            issueValuesFromShared(o, ropeBox(0), values(0));
            fenceAsyncShared(); // P1's stores, before wg0's wgmma reads them
            barrierArrive(kOddPReady, kConsumers);
            if (odd) {
                wgmmaWait<1>();
                pinRegisters(p);
                mbarArrive(&ctl->released[1][1]);
            }
            wgmmaWait<0>();
            pinRegisters(o);
            mbarArrive(&ctl->released[0][1]);
        }
    }

    // Both warpgroups keep O and l at the same max; l adds up.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        if (quad == 0)
            ctl->rowSum[wg][row0 + 8 * h] = l[h];
    }
    barrierSync(kSumsReady, kConsumers);
    const long long rowsTotal = static_cast<long long>(gridDim.x) * kRows * w.splits;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        const float rowL = ctl->rowSum[0][row] + ctl->rowSum[1][row];
        const long long head = w.rowBase + row;
        if (w.splits == 1) {
            const float inv = rowL > 0.f ? 1.f / rowL : 0.f;
            __nv_bfloat16* dst = out + head * kDV + wg * kHalfV + quad * 2;
#pragma unroll
            for (int c = 0; c < kHalfV / 8; ++c)
                *reinterpret_cast<__nv_bfloat162*>(dst + c * 8)
                    = __floats2bfloat162_rn(o[c * 4 + 2 * h] * inv, o[c * 4 + 2 * h + 1] * inv);
        } else {
            const long long at = head * w.splits + w.split;
            float* dst = partials + 4 + at * kDV + wg * kHalfV + quad * 2;
#pragma unroll
            for (int c = 0; c < kHalfV / 8; ++c)
                *reinterpret_cast<float2*>(dst + c * 8) = make_float2(o[c * 4 + 2 * h], o[c * 4 + 2 * h + 1]);
            if (wg == 0 && quad == 0)
                reinterpret_cast<float2*>(partials + 4 + rowsTotal * kDV)[at] = make_float2(m[h], rowL);
        }
    }
}

// The producer's first job in both kernels: the CTA's 64 query rows into Q's 9 swizzled boxes, thread t of the
// warpgroup copying chunk t % 8 of rows t / 8 + 16 i; one arrival per thread on qReady once its copies land.
__device__ __forceinline__ void copyQ(const Work& w, const __nv_bfloat16* q, int t)
{
    const __nv_bfloat16* rows = q + w.rowBase * kDK + (t % 8) * 8;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = t / 8 + 16 * i;
#pragma unroll
        for (int box = 0; box < kBoxes; ++box)
            copyAsync16(w.q + box * kBoxBytes + swizzled(r, t % 8), rows + r * kDK + box * 64, true);
    }
    cpAsyncArrive(&w.control->qReady);
}

// Every producer thread arrives once on qReady and once on each side's ready per block (cp.async.mbarrier.arrive).
__device__ __forceinline__ void initBarriers(Control* ctl)
{
    mbarInit(&ctl->qReady, 128);
    for (int b = 0; b < 2; ++b)
        for (int side = 0; side < 2; ++side)
            mbarInit(&ctl->ready[b][side], 128);
    // Readers: buffer 0's left half wg0 (S, its P V), right half wg1 (P0 V0 after wg0's S); buffer 1's left half wg0
    // (P1 V1 after wg1's S), right half both (wg1's P V, wg0 reading P1 from its rope box).
    mbarInit(&ctl->released[0][0], 128);
    mbarInit(&ctl->released[0][1], 128);
    mbarInit(&ctl->released[1][0], 128);
    mbarInit(&ctl->released[1][1], 256);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ unsigned char* alignedShared(unsigned char* raw)
{
    return raw + ((1024 - (sharedAddress(raw) & 1023)) & 1023);
}


extern "C" __global__ void __launch_bounds__(kThreads, 1)
    sparse_mla_decode_wgmma(float* partials, __nv_bfloat16* out, const __nv_bfloat16* q, const __nv_bfloat16* kv_cache,
        const int* block_table, const int* indices, int SQ, int MAXP, float scale)
{
    extern __shared__ unsigned char smemRaw[];
    unsigned char* smem = alignedShared(smemRaw);
    const int rowBlock = blockIdx.x; // (b * SQ + j) * 2 + half: query rows rowBlock * 64 .. + 63, list rowBlock / 2
    const int b = rowBlock / (2 * SQ);
    Work w;
    w.q = sharedAddress(smem);
    w.control = reinterpret_cast<Control*>(smem + 3 * kTileBytes);
    int* cacheRows = reinterpret_cast<int*>(smem + 3 * kTileBytes + 1024); // [TOPK]
    w.rowBase = static_cast<long long>(rowBlock) * kRows;
    w.split = blockIdx.y;
    w.splits = gridDim.y;
    w.scaleLog2 = scale * 1.4426950408889634f;
    if (rowBlock == 0 && w.split == 0 && threadIdx.x == 0)
        reinterpret_cast<int*>(partials)[0] = w.splits;
    if (threadIdx.x == 0)
        initBarriers(w.control);
    __syncthreads();
    // The list's blocks of 64 rows, cut into splits alike for both CTAs of a (sequence, j).
    auto splitList = [&](int listed) {
        const int perSplit = ((listed + kBN - 1) / kBN + w.splits - 1) / w.splits;
        w.tBegin = w.split * perSplit * kBN;
        w.tEnd = min(listed, w.tBegin + perSplit * kBN);
        w.blocks = w.tEnd > w.tBegin ? (w.tEnd - w.tBegin + kBN - 1) / kBN : 0;
    };

    const int wg = threadIdx.x / 128;
    if (wg == 2) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
        copyQ(w, q, t);
        // Compaction: thread t owns slots [16 t, 16 t + 16); its listed rows go after those of the threads before it
        // (the slots are read twice rather than kept: the producer has 40 registers).
        const int4* slots
            = reinterpret_cast<const int4*>(indices + static_cast<long long>(rowBlock / 2) * kTopK) + t * 4;
        int count = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int4 v = slots[k];
            count += (v.x >= 0) + (v.y >= 0) + (v.z >= 0) + (v.w >= 0);
        }
        int inclusive = count;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int n = __shfl_up_sync(0xffffffffu, inclusive, o);
            if (lane >= o)
                inclusive += n;
        }
        if (lane == 31)
            w.control->warpTotals[warp] = inclusive;
        barrierSync(kScan, 128);
        int at = inclusive - count, listed = 0;
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            at += v < warp ? w.control->warpTotals[v] : 0;
            listed += w.control->warpTotals[v];
        }
        const int* pages = block_table + static_cast<long long>(b) * MAXP;
        auto list = [&](int position) {
            if (position >= 0)
                cacheRows[at++] = __ldg(pages + position / kPS) * kPS + position % kPS;
        };
#pragma unroll 2 // eight block_table reads in flight: the list is on every block's critical path
        for (int k = 0; k < 4; ++k) {
            const int4 v = slots[k];
            list(v.x);
            list(v.y);
            list(v.z);
            list(v.w);
        }
        if (t == 0)
            w.control->listed = listed;
        barrierSync(kListReady, kThreads); // every producer reads entries the others wrote
        splitList(listed);
        // Every block by all 128 threads, side by side in the order the consumers free them (buffer 0 left, right,
        // buffer 1 left, right): thread t copies chunk t % 8 of rows t / 8 + 16 i, each row's boxes of the side back
        // to back (with L2FETCH, L2 fetches the bytes around each piece along), then arrives once on the side's barrier.
        // Rows past the split are zero-filled, nothing read.
        const int chunk = t % 8, group = t / 8;
        for (int blk = 0; blk < w.blocks; ++blk) {
            const int buffer = blk & 1;
            const unsigned tile = bufferAddress(w, buffer);
            int rows[4]; // cache rows, -1 past the split
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int at = w.tBegin + blk * kBN + group + 16 * i;
                rows[i] = at < w.tEnd ? cacheRows[at] : -1;
            }
#pragma unroll
            for (int side = 0; side < 2; ++side) {
                mbarWait(&w.control->released[buffer][side], ((blk >> 1) & 1) ^ 1);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const __nv_bfloat16* from = kv_cache + static_cast<long long>(max(rows[i], 0)) * kDK + chunk * 8;
#pragma unroll
                    for (int box = side ? kLeftBoxes : 0; box < (side ? kBoxes : kLeftBoxes); ++box)
                        copyAsync16Prefetch(
                            tile + box * kBoxBytes + swizzled(group + 16 * i, chunk), from + box * 64, rows[i] >= 0);
                }
                cpAsyncArrive(&w.control->ready[buffer][side]);
            }
        }
        asm volatile("cp.async.wait_all;" ::: "memory"); // nothing in flight into a CTA that may be done
        return;
    }
    barrierSync(kListReady, kThreads);
    splitList(w.control->listed);
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    consume(w, wg, partials, out);
}

// One CTA per query row, 4 output columns a thread: the splits' partials weighted by exp2(m - max m).
extern "C" __global__ void __launch_bounds__(kDV / 4)
    sparse_mla_decode_wgmma_merge(__nv_bfloat16* out, const float* partials)
{
    const int splits = reinterpret_cast<const int*>(partials)[0];
    const long long head = blockIdx.x;
    const int d = threadIdx.x * 4;
    const long long rowsTotal = static_cast<long long>(gridDim.x) * splits;
    const float2* ml = reinterpret_cast<const float2*>(partials + 4 + rowsTotal * kDV) + head * splits;
    float mMax = negInf();
    for (int s = 0; s < splits; ++s)
        mMax = fmaxf(mMax, ml[s].x);
    float sum = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < splits; ++s) {
        const float2 v = ml[s];
        const float weight = v.x == negInf() ? 0.f : exp2f(v.x - mMax); // a split with no tokens
        const float4 a = *reinterpret_cast<const float4*>(partials + 4 + (head * splits + s) * kDV + d);
        sum += weight * v.y;
        o.x += weight * a.x;
        o.y += weight * a.y;
        o.z += weight * a.z;
        o.w += weight * a.w;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + head * kDV + d);
    dst[0] = __floats2bfloat162_rn(o.x * inv, o.y * inv);
    dst[1] = __floats2bfloat162_rn(o.z * inv, o.w * inv);
}
