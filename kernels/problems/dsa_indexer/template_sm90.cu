// Template (sm_90a): the lightning indexer streamed at the HBM rate, its dot products on wgmma. The batch's
// (sequence, page) pairs, in block_table order, are cut into one equal contiguous range per CTA (a persistent grid
// of SM_COUNT CTAs at most), so every SM streams the same number of pages whatever B and MAXP are.
//  - A producer warp copies each page (64 tokens x 128 dims, 16 KB) with two TMA boxes of 64 dims, 128-byte swizzled
//    (the layout wgmma reads without bank conflicts; a swizzle row is 64 bf16, a map's rank the tensor's), into a ring of STAGES page buffers (full/empty mbarriers), STAGES pages ahead of the consumers; a page nobody
//    sees (past seq_lens) is not fetched, its full barrier is only arrived on. Before the first page of each sequence
//    it copies that sequence's SQ x 64 query rows (the same swizzle) and weights into one of two query slots, so the
//    next sequence's queries arrive while the current one is multiplied.
//  - CONSUMERS warpgroups take the pages in turn (stage s always belongs to consumer s % CONSUMERS, hence STAGES %
//    CONSUMERS == 0, so each consumer waits on its own stages' phases in order). A page is S[64 tokens, SQ*64] =
//    K_page . Q^T, tokens as wgmma's M and both query rows' heads as its N (m64n64k16 or m64n128k16, 8 k-steps, both
//    operands K-major from shared memory). Its fragment gives each thread two tokens and SQ*16 heads: ReLU, the
//    weights and the head sum run in registers, a quad's four lanes combine and each writes one (row, token) score
//    (heads as M would sum across lanes and warps through shared memory instead).
//    While one consumer sums heads, the other's MMAs run.
// Scores past a row's visible length are -inf; a page past seq_lens is -inf without any math. sm_90a only (wgmma);
// Blackwell keeps the portable template.
#include <cuda_bf16.h>
// @kl:param STAGES = 8 in [2, 3, 4, 6, 8, 9]
// @kl:param CONSUMERS = 2 in [1, 2, 3]
// @kl:param EVICT = 1 in [0, 1]
// @kl:constraint ARCH == 90
// @kl:constraint STAGES % CONSUMERS == 0
// @kl:tensormap tmK tensor=k_index_cache box=(64, 64, 1) swizzle=128B l2promo=256B oob=zero
// @kl:tensormap tmQ tensor=q_index box=(64, 64, SQ, 1) swizzle=128B l2promo=256B oob=zero
// @kl:launch dsa_indexer_stream grid=(min(SM_COUNT, B * MAXP)) block=(CONSUMERS * 128 + 32) smem=(STAGES * 16384 + 2 * (SQ * 16384 + 1024) + 1024) args=(tmK, tmQ, scores, weights, block_table, seq_lens, B, SQ, MAXP)

constexpr int kHeads = 64, kDim = 128, kPageTokens = 64; // the problem's HI, DI, PS
constexpr unsigned kPageBytes = kPageTokens * kDim * 2;
constexpr unsigned kChunkBytes = kPageBytes / 2; // 64 dims of each row: one 128-byte swizzle row, one TMA box
constexpr int kConsumerThreads = CONSUMERS * 128;
constexpr int kThreads = kConsumerThreads + 32;
constexpr int kMaxStages = 9;
static_assert(STAGES <= kMaxStages && STAGES % CONSUMERS == 0, "a stage belongs to one consumer");

// The harness passes each @kl:tensormap as a CUtensorMap by value: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ float negInf()
{
    return __int_as_float(0xff800000u);
}

__device__ __forceinline__ unsigned sharedAddress(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarInit(unsigned long long* bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sharedAddress(bar)), "r"(count));
}

__device__ __forceinline__ void mbarExpect(unsigned long long* bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sharedAddress(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbarArrive(unsigned long long* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sharedAddress(bar)) : "memory");
}

__device__ __forceinline__ void mbarWait(unsigned long long* bar, unsigned parity)
{
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(sharedAddress(bar)),
                 "r"(parity)
                 : "memory");
}

// 64 dims from `dim` of the 64 tokens of cache page `page`; with EVICT the keys (read once) leave L2 first.
__device__ __forceinline__ void copyPageChunk(
    void* dst, const TensorMap* map, int dim, int page, unsigned long long* bar, unsigned long long policy)
{
    if (EVICT)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                     " [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(sharedAddress(dst)),
                     "l"(map), "r"(dim), "r"(0), "r"(page), "r"(sharedAddress(bar)), "l"(policy)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(sharedAddress(dst)),
                     "l"(map), "r"(dim), "r"(0), "r"(page), "r"(sharedAddress(bar))
                     : "memory");
}

// 64 dims from `dim` of sequence b's SQ x 64 query rows.
__device__ __forceinline__ void copyQueryChunk(void* dst, const TensorMap* map, int dim, int b, unsigned long long* bar)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(sharedAddress(dst)),
                 "l"(map), "r"(dim), "r"(0), "r"(0), "r"(b), "r"(sharedAddress(bar))
                 : "memory");
}

__device__ __forceinline__ void copyBytes(void* dst, const void* src, unsigned bytes, unsigned long long* bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     sharedAddress(dst)),
                 "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(sharedAddress(bar))
                 : "memory");
}

// K-major operand in 128-byte swizzle: 8-row groups 1024 bytes apart (SBO), leading offset unused.
__device__ __forceinline__ unsigned long long operandDescriptor(const void* p)
{
    const unsigned long long addr = sharedAddress(p);
    return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmmaFence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmmaCommit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmmaWaitAll()
{
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

// The accumulators are the wgmma's until the wait: pinning them after it keeps the compiler from moving their first
// use (the epilogue) above the wait.
template <int N>
__device__ __forceinline__ void pinAccumulators(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void wgmmaN64(float (&d)[32], unsigned long long da, unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmmaN128(float (&d)[64], unsigned long long da, unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}

template <int SQ_>
__device__ __forceinline__ void wgmmaRows(
    float (&d)[SQ_ * 32], unsigned long long da, unsigned long long db, int accumulate)
{
    if constexpr (SQ_ == 1)
        wgmmaN64(d, da, db, accumulate);
    else
        wgmmaN128(d, da, db, accumulate);
}

// The shared memory both sides index: the page ring, two query slots (each: SQ x 64 rows of the first 64 dims, of
// the last 64, then the SQ x 64 weights; 1024-byte aligned for the swizzle), the barriers.
struct Ring {
    unsigned char* pages;
    unsigned char* querySlots;
    unsigned querySlotBytes;
    unsigned long long* full;
    unsigned long long* empty;
    unsigned long long* queryFull;
    unsigned long long* queryEmpty;
    __device__ unsigned char* page(int stage) const { return pages + stage * kPageBytes; }
    __device__ unsigned char* query(int slot) const { return querySlots + slot * querySlotBytes; }
};

// Consumer c's pages of the range [g0, g1) (global page index g = b * MAXP + p), SQ_ query rows.
template <int SQ_>
__device__ __forceinline__ void consume(const Ring& ring, float* __restrict__ scores, const int* __restrict__ seq_lens,
    int MAXP, int g0, int g1, int c)
{
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32, group = lane / 4, quad = lane % 4;
    float acc[SQ_ * 32];
    int piece = 0;
    for (int b = g0 / MAXP; b * MAXP < g1; ++b, ++piece) {
        const int slot = piece & 1, seqLen = __ldg(seq_lens + b);
        const int last = min(g1, (b + 1) * MAXP) - g0;
        int i = max(g0, b * MAXP) - g0; // this consumer's first page of the sequence: i % CONSUMERS == c
        i += (c - i % CONSUMERS + CONSUMERS) % CONSUMERS;
        const unsigned char* query = ring.query(slot);
        mbarWait(&ring.queryFull[slot], (piece >> 1) & 1);
        // The weights of this thread's accumulator columns: head pair 2 * quad of every 8 (both rows' heads).
        float2 w[SQ_ * 8];
#pragma unroll
        for (int n = 0; n < SQ_ * 8; ++n)
            w[n] = reinterpret_cast<const float2*>(query + SQ_ * kPageBytes)[n * 4 + quad];
        for (; i < last; i += CONSUMERS) {
            const int stage = i % STAGES, p = g0 + i - b * MAXP;
            mbarWait(&ring.full[stage], (i / STAGES) & 1);
            if (p * kPageTokens >= seqLen) { // past the sequence for every row: nothing was fetched
                __syncwarp();
                if (lane == 0)
                    mbarArrive(&ring.empty[stage]);
                for (int x = t; x < SQ_ * kPageTokens; x += 128)
                    scores[((long long)b * SQ_ + x / kPageTokens) * MAXP * kPageTokens + p * kPageTokens
                        + x % kPageTokens]
                        = negInf();
                continue;
            }
            const unsigned char* keys = ring.page(stage);
            wgmmaFence();
#pragma unroll
            for (int chunk = 0; chunk < 2; ++chunk) {
                const unsigned long long da = operandDescriptor(keys + chunk * kChunkBytes);
                const unsigned long long db = operandDescriptor(query + chunk * SQ_ * kChunkBytes);
#pragma unroll
                for (int k = 0; k < 4; ++k) // +32 bytes per k16 step
                    wgmmaRows<SQ_>(acc, da + 2 * k, db + 2 * k, chunk > 0 || k > 0);
            }
            wgmmaCommit();
            wgmmaWaitAll();
            pinAccumulators(acc);
            __syncwarp();
            if (lane == 0)
                mbarArrive(&ring.empty[stage]);

            // Fragment of m64nNk16: per 8 columns n, tokens warp*16 + group (+8), columns n*8 + quad*2 (+1); column
            // j*64 + h is head h of query row j. partial[j][e]: the thread's heads of row j at token group + 8e.
            float partial[SQ_][2];
#pragma unroll
            for (int j = 0; j < SQ_; ++j)
                partial[j][0] = partial[j][1] = 0.f;
#pragma unroll
            for (int n = 0; n < SQ_ * 8; ++n) {
                float* f = acc + n * 4;
                partial[n / 8][0] += w[n].x * fmaxf(f[0], 0.f) + w[n].y * fmaxf(f[1], 0.f);
                partial[n / 8][1] += w[n].x * fmaxf(f[2], 0.f) + w[n].y * fmaxf(f[3], 0.f);
            }
            // The quad's four lanes hold the same tokens' other heads: sum them so that lane quad ends with row
            // quad / 2 (0 with one row), token group + 8 * (quad % 2).
            float even, odd;
            int j = 0;
            if constexpr (SQ_ == 2) {
                const bool upper = quad & 2;
                j = upper ? 1 : 0;
                even = (upper ? partial[1][0] : partial[0][0])
                    + __shfl_xor_sync(0xffffffffu, upper ? partial[0][0] : partial[1][0], 2);
                odd = (upper ? partial[1][1] : partial[0][1])
                    + __shfl_xor_sync(0xffffffffu, upper ? partial[0][1] : partial[1][1], 2);
            } else {
                even = partial[0][0] + __shfl_xor_sync(0xffffffffu, partial[0][0], 2);
                odd = partial[0][1] + __shfl_xor_sync(0xffffffffu, partial[0][1], 2);
            }
            const bool second = quad & 1;
            const float total = (second ? odd : even) + __shfl_xor_sync(0xffffffffu, second ? even : odd, 1);
            if (SQ_ == 2 || quad < 2) {
                const int s = p * kPageTokens + warp * 16 + group + (second ? 8 : 0);
                const int visible = seqLen - SQ_ + 1 + j;
                scores[((long long)b * SQ_ + j) * MAXP * kPageTokens + s] = s < visible ? total : negInf();
            }
        }
        __syncwarp();
        if (lane == 0)
            mbarArrive(&ring.queryEmpty[slot]);
    }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) dsa_indexer_stream(const __grid_constant__ TensorMap tmK,
    const __grid_constant__ TensorMap tmQ, float* __restrict__ scores, const float* __restrict__ weights,
    const int* __restrict__ block_table, const int* __restrict__ seq_lens, int B, int SQ, int MAXP)
{
    extern __shared__ unsigned char smemRaw[];
    __shared__ unsigned long long full[kMaxStages], empty[kMaxStages], queryFull[2], queryEmpty[2];
    Ring ring;
    ring.pages = smemRaw + ((1024 - (sharedAddress(smemRaw) & 1023)) & 1023);
    ring.querySlots = ring.pages + STAGES * kPageBytes;
    ring.querySlotBytes = SQ * kPageBytes + 1024;
    ring.full = full;
    ring.empty = empty;
    ring.queryFull = queryFull;
    ring.queryEmpty = queryEmpty;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // This CTA's pages: [g0, g1) of the B * MAXP (at most 2^16: times the grid, at most SM_COUNT, fits 32 bits).
    const unsigned total = static_cast<unsigned>(B) * MAXP;
    const int g0 = static_cast<int>(blockIdx.x * total / gridDim.x);
    const int g1 = static_cast<int>((blockIdx.x + 1) * total / gridDim.x);
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarInit(&full[s], 1);
            mbarInit(&empty[s], 4); // the owning consumer's four warps
        }
        for (int s = 0; s < 2; ++s) {
            mbarInit(&queryFull[s], 1);
            mbarInit(&queryEmpty[s], CONSUMERS * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == CONSUMERS * 4) { // the producer: lane x looks up page base + x; lane 0 issues the copies in order
        unsigned long long policy = 0;
        if (EVICT)
            asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
        if (lane == 0) {
            asm volatile("prefetch.tensormap [%0];" ::"l"(&tmK) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(&tmQ) : "memory");
        }
        int stage = 0, piece = -1, current = -1;
        unsigned phase = 0;
        for (int base = g0; base < g1; base += 32) {
            int page = 0, live = 0;
            if (base + lane < g1) {
                const int g = base + lane, b = g / MAXP;
                live = (g - b * MAXP) * kPageTokens < __ldg(seq_lens + b);
                page = __ldg(block_table + g); // block_table is [B, MAXP]: entry g is page g % MAXP of sequence g / MAXP
            }
            const int count = min(32, g1 - base);
            for (int x = 0; x < count; ++x) {
                const int pageX = __shfl_sync(0xffffffffu, page, x), liveX = __shfl_sync(0xffffffffu, live, x);
                const int b = (base + x) / MAXP;
                if (lane == 0) {
                    if (b != current) { // a new sequence: its queries and weights into the next query slot
                        current = b;
                        ++piece;
                        unsigned long long* bar = &queryFull[piece & 1];
                        unsigned char* slot = ring.query(piece & 1);
                        mbarWait(&queryEmpty[piece & 1], ((piece >> 1) & 1) ^ 1);
                        mbarExpect(bar, SQ * (kPageBytes + kHeads * 4));
                        copyQueryChunk(slot, &tmQ, 0, b, bar);
                        copyQueryChunk(slot + SQ * kChunkBytes, &tmQ, 64, b, bar);
                        copyBytes(slot + SQ * kPageBytes, weights + (long long)b * SQ * kHeads, SQ * kHeads * 4, bar);
                    }
                    mbarWait(&empty[stage], phase ^ 1);
                    if (liveX) {
                        mbarExpect(&full[stage], kPageBytes);
                        copyPageChunk(ring.page(stage), &tmK, 0, pageX, &full[stage], policy);
                        copyPageChunk(ring.page(stage) + kChunkBytes, &tmK, 64, pageX, &full[stage], policy);
                    } else {
                        mbarArrive(&full[stage]);
                    }
                }
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }
    if (SQ == 1)
        consume<1>(ring, scores, seq_lens, MAXP, g0, g1, warp / 4);
    else
        consume<2>(ring, scores, seq_lens, MAXP, g0, g1, warp / 4);
}
