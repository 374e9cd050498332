// Template (sm_90a): paged decode attention streamed at the HBM rate. A CTA reads every KV head of the tokens it
// takes, so each token's K row and V row (8 heads x 128 dims, 2 KB each, contiguous in the cache) arrive as one bulk
// copy (cp.async.bulk, counted on the stage's mbarrier), and a page's rows follow each other in memory: the DRAM
// sees long sequential runs instead of 256-byte pieces at a 2 KB stride fetched by eight CTAs at different times.
// A producer warp fills a ring of STAGES stages of TT token rows (one lane per row: the page from block_table, rows
// past the piece's end repeat its last row, so every stage counts the same bytes and holds finite values), and
// eight consumer warps, one per KV head, compute its G = HQ / 8 query heads on tensor cores as the sm_80 template
// does (S = Q . K^T with mma.sync m16n8k16, the G heads padded to 16 rows; online softmax in fp32 on exp2;
// O += P . V with P re-packed from the score fragments), then release the stage.
// Rows sit 2064 bytes apart in shared memory (2 KB + 16): eight consecutive tokens' 16-byte chunks fall in
// different banks, so ldmatrix is conflict-free without a swizzle. (A TMA box of all eight heads would swizzle by
// the head, row % 8, and leave a head's tokens in one bank group.)
// Work: the batch's tokens (prefix sums of seq_lens) are cut into gridDim.x equal ranges, one per CTA, so every CTA
// streams the same bytes whatever B and the lengths are; the grid is SM_COUNT (capped at 256, which bounds the
// workspace) or fewer for small batches (MINTOK tokens a CTA at least). A CTA's range crosses sequences: a sequence
// it holds whole is written to out, a piece of one is an unnormalised partial (acc, m, l) in one of the CTA's two
// slots (its first sequence, its last), which the merge kernel combines (launched with programmatic dependent
// launch: it waits for the split kernel with griddepcontrol.wait, so its launch overlaps the split's tail). With
// one CTA nothing is split and the merge's grid is 0. CTA 0 leaves the grid size, the token total and the prefix
// sums in the workspace's header for the merge (every launch writes them, so nothing crosses launches).
// P . V takes P as two bf16 halves (P = hi + lo, two MMAs): with one, P's 8 bits cost up to 0.02 of max error on
// outlier inputs (the harness rejected TT 8 once on a held-out outlier shape at 0.0207), the problem's whole bf16
// budget; the second MMA costs nothing measurable in a kernel that waits on memory.
// SEQ > 0 partitions by sequence instead: a cluster of P CTAs a sequence, P = min(SEQ, SM count / B) (at least 1),
// CTA r taking its r-th equal share of tokens. With P = 1 every sequence is written whole; with more, the pieces
// meet in distributed shared memory (each CTA's (acc, m, l) in its drained ring, CTA r combining heads r, r + P, ...),
// so there is no merge kernel and no partial goes through global memory: the merge cost 4.4 us of 73 at B=16 ctx 4096
// and 18 of 279 at B=128 HQ=128 on the H200 (bench/results round 12); on an H100 this partition runs B=128 HQ=128 in
// 356 us against the other's 388 (round 22). The grid is B x P, but not every cluster may be resident at once: an
// H100 held 15 clusters of 8 and 15 of 7, so B=16 at SEQ 8 or 7 ran a second wave (136-163 us against 101), and
// SEQ 4 left half the SMs idle; batches that small stay with the token-range partition.
// FUSE = 1 drops the merge kernel: a CTA that leaves a partial counts it on its sequence's arrival counter (a zeroed
// workspace that the kernel leaves at zero; the harness still zeroes it before each launch), and the CTA whose piece
// arrives last combines the sequence's pieces after its own loop, copied into its drained ring where they fit. The
// merge kernel's launch, its wait for the split grid and its reading of the header go; one CTA combines all of a
// sequence's pieces, which suits batches whose sequences have few (B = 16 on 132 SMs: 9), not one sequence cut over
// every SM (B = 1: 132 pieces, gathered 16 a load round).
// Defaults: 8-token stages 6 deep. On the H200 (driver, graph replay) they match 16-token stages 3 deep within 1% at
// B=64 ctx 8192 and B=4 ctx 131072, and run B=16 ctx 4096 in 73.6-75.0 us against 77.3-78.0 (bench/results round 8
// and 9); the harness's single runs differ less than their run-to-run spread there.
#include <cuda_bf16.h>
// @kl:param TT = 8 in [8, 16]
// @kl:param STAGES = 6 in [2, 3, 4, 5, 6]
// @kl:param MINTOK = 32 in [16, 32, 64, 128, 256]
// @kl:param EVICT = 1 in [0, 1]
// @kl:param SEQ = 0 in [0, 1, 2, 4, 7, 8]
// @kl:param LAZY = 0 in [0, 1]
// @kl:param FUSE = 0 in [0, 1]
// @kl:constraint ARCH >= 90
// The ring and, for up to 256 sequences (the problem's B), the prefix sums, barriers and scan totals in 227 KB.
// @kl:constraint STAGES * TT * 4128 + 1040 + 16 * STAGES + 32 <= 232448
// A cluster's pieces: (acc, m, l) of each of up to 128 query heads in the drained ring. MINTOK and the partials
// workspace serve the other partition only.
// @kl:constraint SEQ <= 1 || 128 * (4 * 128 + 8) <= STAGES * TT * 4128
// @kl:constraint SEQ == 0 || MINTOK == 32
// @kl:constraint SEQ == 0 || FUSE == 0
// @kl:workspace partials bytes=(SEQ > 0 ? 16 : 16 * (ceil_div(B + 1, 4) + 1) + 2 * min(256, ceil_div(B * MAXP * PS, MINTOK)) * HQ * (D + 2) * 4) init=poison
// @kl:workspace arrivals bytes=(FUSE == 1 ? 4 * B : 0) init=zero
// @kl:launch decode_attention_stream grid=(SEQ > 0 ? B * max(1, min(SEQ, div(SM_COUNT, B))) : min(min(SM_COUNT, 256), ceil_div(B * MAXP * PS, MINTOK))) block=(288) smem=(STAGES * TT * 4128 + 16 * ceil_div(B + 1, 4) + 16 * STAGES + 32) cluster=(SEQ > 0 ? max(1, min(SEQ, div(SM_COUNT, B))) : 1, 1, 1) args=(partials, arrivals, out, q, k_cache, v_cache, block_table, seq_lens, B, HQ, PS, MAXP, scale)
// @kl:launch decode_attention_merge grid=(SEQ == 0 && FUSE == 0 && min(min(SM_COUNT, 256), ceil_div(B * MAXP * PS, MINTOK)) > 1 ? div(B * HQ * min(8, next_pow2(ceil_div(ceil_div(min(min(SM_COUNT, 256), ceil_div(B * MAXP * PS, MINTOK)), B) + 1, 8))), 8) : 0) block=(256) pdl=1 args=(out, partials, B, HQ)

constexpr int kD = 128;
constexpr int kHeads = 8; // the problem's HKV
constexpr int kRowBytes = kHeads * kD * 2; // one token's K (or V) row: every head, contiguous in the cache
constexpr int kPitch = kRowBytes + 16; // in shared memory: the next row's chunks one bank group further
constexpr int kStageBytes = 2 * TT * kPitch; // TT rows of K, then TT rows of V
constexpr int kScoreTiles = TT / 8; // n8 tiles of S per stage
constexpr int kDTiles = kD / 8; // n8 tiles of O
constexpr int kConsumerThreads = kHeads * 32;
constexpr int kThreads = kConsumerThreads + 32; // and the producer warp
constexpr int kMergeUnroll = 8; // pieces a merge warp loads at once
constexpr int kSeq = SEQ > 0 ? SEQ : 1; // the most CTAs a sequence where SEQ > 0
static_assert(TT == 8 || TT == 16, "a stage is one or two n8 tiles of S, a K row and a V row per producer lane");

__device__ __forceinline__ float negInf()
{
    return __int_as_float(0xff800000u);
}

__device__ __forceinline__ unsigned sharedAddress(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarInit(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbarExpect(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarArrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbarWait(unsigned bar, unsigned parity)
{
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

// One row of kRowBytes from global src into shared dst, counted on bar; with EVICT the KV stream (read once) goes
// first out of L2, which keeps the partials the merge reads there.
__device__ __forceinline__ void bulkRow(unsigned dst, const void* src, unsigned bar, unsigned long long policy)
{
    if (EVICT)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], "
                     "%2, [%3], %4;" ::"r"(dst),
                     "l"(__cvta_generic_to_global(src)), "r"(kRowBytes), "r"(bar), "l"(policy)
                     : "memory");
    else
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
            "l"(__cvta_generic_to_global(src)), "r"(kRowBytes), "r"(bar)
            : "memory");
}

__device__ __forceinline__ void loadMatrices(unsigned addr, unsigned (&r)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void loadMatricesTransposed(unsigned addr, unsigned (&r)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma1688(float (&c)[4], unsigned a0, unsigned a1, unsigned b)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(b));
}

__device__ __forceinline__ unsigned packBf16(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
}

// The header's bytes in the workspace: grid size, token total, two spare words, then the B + 1 prefix sums.
__device__ __forceinline__ int headerBytes(int B)
{
    return 16 * ((B + 4) / 4 + 1);
}

// The batch's tokens cut into C equal ranges: CTA c holds [rangeStart(c), rangeStart(c + 1)) (the index functions
// are host-callable so that bench/attention/decode_sm90_driver.cu checks the partition on the CPU). In 32 bits, since
// the merge computes them for every piece of a sequence and a 64-bit division is some 80 instructions: c x total and
// (g + 1) x C stay below 2^32 (the problem's 2^20 tokens, at most 256 CTAs).
__host__ __device__ __forceinline__ int rangeStart(unsigned c, unsigned C, unsigned total)
{
    return static_cast<int>(c * total / C);
}

// Whether CTA c's range holds any token (only not when the batch has fewer tokens than CTAs): a CTA without tokens
// leaves no piece.
__host__ __device__ __forceinline__ bool holdsTokens(unsigned c, unsigned C, unsigned total)
{
    return rangeStart(c, C, total) < rangeStart(c + 1, C, total);
}

// SEQ > 0: where share r of P of a sequence of len tokens starts (share P ends at len).
__host__ __device__ __forceinline__ int shareStart(int r, int P, int len)
{
    return r * len / P;
}

// The CTA whose range holds token g.
__host__ __device__ __forceinline__ int rangeOwner(unsigned g, unsigned C, unsigned total)
{
    return static_cast<int>(((g + 1) * C - 1) / total);
}

// Where CTA c leaves its piece of the sequence whose tokens start at lo: slot 2c for the sequence its range starts
// in, 2c + 1 for the one it ends in.
__host__ __device__ __forceinline__ long long slotOf(int c, int C, int total, int lo)
{
    return 2LL * c + (rangeStart(c, C, total) < lo ? 1 : 0);
}

// A CTA's walk over its tokens [g0, g1) of the batch (sequence b's tokens are prefix[b] .. prefix[b + 1] - 1): the
// current tile starts at token t of sequence b, inside the piece [begin, end) of b that the range holds. The producer
// and the consumers take the same walk.
struct Walk {
    int b, t, begin, end;
};

// From sequence w.b on, the first with tokens in [g0, g1): its piece and first tile. False past the range.
__host__ __device__ __forceinline__ bool settle(Walk& w, const int* prefix, int B, int g0, int g1)
{
    for (; w.b < B && prefix[w.b] < g1; ++w.b) {
        const int lo = prefix[w.b];
        w.begin = max(g0, lo) - lo;
        w.end = min(g1, prefix[w.b + 1]) - lo;
        if (w.end > w.begin) {
            w.t = w.begin;
            return true;
        }
    }
    return false;
}

// The walk's start: the sequence holding token g0 (binary search over the prefix sums), and its piece.
__host__ __device__ __forceinline__ bool walkStart(Walk& w, const int* prefix, int B, int g0, int g1)
{
    int lo = 0, hi = B;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (prefix[mid + 1] <= g0)
            lo = mid + 1;
        else
            hi = mid;
    }
    w.b = lo;
    return g0 < g1 && settle(w, prefix, B, g0, g1);
}

__host__ __device__ __forceinline__ bool walkNext(Walk& w, const int* prefix, int B, int g0, int g1)
{
    w.t += TT;
    if (w.t < w.end)
        return true;
    ++w.b;
    return settle(w, prefix, B, g0, g1);
}

// The token whose row the producer copies into row r of the tile: past the piece's end, the piece's last one.
__host__ __device__ __forceinline__ int sourceToken(const Walk& w, int r)
{
    return min(w.t + r, w.end - 1);
}

// A piece that is its whole sequence is written to out; any other is a partial for the merge.
__host__ __device__ __forceinline__ bool wholeSequence(const Walk& w, const int* prefix)
{
    return w.begin == 0 && w.end == prefix[w.b + 1] - prefix[w.b];
}

// Q's A fragments for KV head kvh of sequence b (rows = its G query heads, zero-padded to 16), unscaled.
__device__ __forceinline__ void loadQ(
    unsigned (&qf)[kD / 16][4], const __nv_bfloat16* q, int b, int HQ, int kvh, int G, int group, int quad)
{
    const unsigned* rows = reinterpret_cast<const unsigned*>(q + ((long long)b * HQ + kvh * G) * kD);
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
        const int c = kk * 8 + quad; // in bf16 pairs
        qf[kk][0] = group < G ? rows[group * (kD / 2) + c] : 0u;
        qf[kk][1] = group + 8 < G ? rows[(group + 8) * (kD / 2) + c] : 0u;
        qf[kk][2] = group < G ? rows[group * (kD / 2) + c + 4] : 0u;
        qf[kk][3] = group + 8 < G ? rows[(group + 8) * (kD / 2) + c + 4] : 0u;
    }
}

// (mMax, sum, o) absorbs a piece's (m, l) and unnormalised o, all in the exp2 domain; mMax is -inf before any piece.
__device__ __forceinline__ void mergePiece(float& mMax, float& sum, float4& o, float2 ml, float4 a)
{
    const float mNew = fmaxf(mMax, ml.x);
    const float keep = exp2f(mMax - mNew), weight = exp2f(ml.x - mNew);
    sum = sum * keep + ml.y * weight;
    o = make_float4(
        o.x * keep + a.x * weight, o.y * keep + a.y * weight, o.z * keep + a.z * weight, o.w * keep + a.w * weight);
    mMax = mNew;
}

// One k16 (or k8) step's P fragment as a bf16 pair hi + lo.
__device__ __forceinline__ void splitP(unsigned& hi, unsigned& lo, float a, float b)
{
    hi = packBf16(a, b);
    const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&hi);
    lo = packBf16(a - __low2float(h), b - __high2float(h));
}

// Rows h (group + 8h) of a warp's unnormalised piece, query head head, at dst: acc as [HQ][kD] floats, then (m, l)
// per head. The layout of a global partial slot and of a cluster CTA's shared-memory piece alike.
__device__ __forceinline__ void storePiece(
    float* dst, const float (&acc)[kDTiles][4], int h, float m, float l, int head, int HQ, int quad)
{
    float* o = dst + head * kD + quad * 2;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
        *reinterpret_cast<float2*>(o + dt * 8) = make_float2(acc[dt][2 * h], acc[dt][2 * h + 1]);
    if (quad == 0)
        reinterpret_cast<float2*>(dst + HQ * kD)[head] = make_float2(m, l);
}

// The pieces that CTAs first, first + W, ... up to c1 left of the sequence whose tokens start at lo, absorbed into
// (mMax, sum, o) for query head head, four dims a lane, UNROLL pieces loaded at once (from L2: with FUSE another
// CTA wrote them during this launch). A CTA without tokens has no piece.
template <int UNROLL>
__device__ __forceinline__ void gatherPieces(float& mMax, float& sum, float4& o, const float* slots, int C, int total,
    int lo, int first, int c1, int W, int head, int HQ, int lane)
{
    for (; first <= c1; first += UNROLL * W) {
        float2 ml[UNROLL];
        float4 a[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int cta = first + u * W;
            ml[u] = make_float2(negInf(), 0.f); // past c1, or no piece
            if (cta <= c1 && holdsTokens(cta, C, total)) {
                const float* slot = slots + slotOf(cta, C, total, lo) * HQ * (kD + 2);
                ml[u] = __ldcg(reinterpret_cast<const float2*>(slot + (long long)HQ * kD) + head);
                a[u] = __ldcg(reinterpret_cast<const float4*>(slot + (long long)head * kD) + lane);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (ml[u].x != negInf())
                mergePiece(mMax, sum, o, ml[u], a[u]);
    }
}

// A lane's four dims of one query head's output, normalised.
__device__ __forceinline__ void storeHead(__nv_bfloat16* dst, float4 o, float sum)
{
    const float inv = 1.f / sum;
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(o.x * inv, o.y * inv);
    *reinterpret_cast<__nv_bfloat162*>(dst + 2) = __floats2bfloat162_rn(o.z * inv, o.w * inv);
}

// FUSE: once this CTA's piece of the sequence [lo, hi) (the batch's b-th) is in its slot, counts it on the sequence's
// arrival counter; true in every consumer thread of the CTA whose piece was the sequence's last (which leaves the
// counter at zero for the next launch). Called by every consumer thread; shared is a word no one else uses by then.
__device__ __forceinline__ bool arrivedLast(
    unsigned* arrivals, int b, int lo, int hi, int C, int total, int warp, int lane, volatile int* shared)
{
    __threadfence(); // this thread's part of the piece, visible to whichever CTA combines
    asm volatile("bar.sync 2, %0;" ::"n"(kConsumerThreads) : "memory");
    if (warp == 0) {
        int pieces = 0;
        for (int x = rangeOwner(lo, C, total) + lane, c1 = rangeOwner(hi - 1, C, total); x <= c1; x += 32)
            pieces += holdsTokens(x, C, total) ? 1 : 0;
        pieces = __reduce_add_sync(0xffffffffu, pieces);
        if (lane == 0) {
            const bool last = atomicAdd(arrivals + b, 1u) == static_cast<unsigned>(pieces - 1);
            if (last)
                atomicExch(arrivals + b, 0u);
            *shared = last ? 1 : 0;
        }
    }
    asm volatile("bar.sync 2, %0;" ::"n"(kConsumerThreads) : "memory");
    return *shared != 0;
}

// FUSE: sequence [lo, hi)'s pieces combined into its output rows by the CTA whose piece arrived last, once its ring is
// drained. Where every piece fits the ring, the consumer threads copy the slots into it all at once (cp.async from L2:
// one round trip), and each warp combines its heads there; otherwise each warp gathers its heads' pieces from the
// slots, 16 a load round.
__device__ __forceinline__ void combineSequence(unsigned char* ring, const float* slots, __nv_bfloat16* out, int lo,
    int hi, int C, int total, int HQ, int warp, int lane)
{
    const int c0 = rangeOwner(lo, C, total), c1 = rangeOwner(hi - 1, C, total), n = c1 - c0 + 1;
    const int slotFloats = HQ * (kD + 2);
    if (static_cast<long long>(n) * slotFloats * 4 > STAGES * kStageBytes) {
        for (int head = warp; head < HQ; head += kHeads) {
            float mMax = negInf(), sum = 0.f;
            float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
            gatherPieces<16>(mMax, sum, o, slots, C, total, lo, c0, c1, 1, head, HQ, lane);
            storeHead(out + head * kD + lane * 4, o, sum);
        }
        return;
    }
    float* staged = reinterpret_cast<float*>(ring);
    asm volatile("bar.sync 2, %0;" ::"n"(kConsumerThreads) : "memory"); // every warp is done with the ring
    for (int k = 0; k < n; ++k) {
        const int cta = c0 + k;
        if (!holdsTokens(cta, C, total))
            continue;
        const float* slot = slots + slotOf(cta, C, total, lo) * slotFloats;
        for (int e = (warp * 32 + lane) * 4; e < slotFloats; e += kConsumerThreads * 4)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sharedAddress(staged + k * slotFloats + e)),
                         "l"(__cvta_generic_to_global(slot + e))
                         : "memory");
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_all;" ::: "memory");
    asm volatile("bar.sync 2, %0;" ::"n"(kConsumerThreads) : "memory");
    for (int head = warp; head < HQ; head += kHeads) {
        float mMax = negInf(), sum = 0.f;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int k = 0; k < n; ++k)
            if (holdsTokens(c0 + k, C, total)) {
                const float* piece = staged + k * slotFloats;
                mergePiece(mMax, sum, o, reinterpret_cast<const float2*>(piece + HQ * kD)[head],
                    reinterpret_cast<const float4*>(piece + head * kD)[lane]);
            }
        storeHead(out + head * kD + lane * 4, o, sum);
    }
    asm volatile("bar.sync 2, %0;" ::"n"(kConsumerThreads) : "memory"); // read before a second sequence's pieces land
}

__device__ __forceinline__ void clusterSync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The P pieces of a cluster's sequence, combined from each CTA's (acc, m, l) at part (the same offset in every
// CTA's shared memory: acc as [HQ][kD] floats, then (m, l) per head). CTA r takes heads r, r + P, ..., a warp a head,
// four dims a lane; every thread of the cluster calls it.
__device__ __forceinline__ void mergeCluster(unsigned part, __nv_bfloat16* out, int HQ, int P, int warp, int lane)
{
    __syncwarp();
    clusterSync(); // every CTA's pieces written
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    for (int head = rank + P * warp; head < HQ; head += P * (kThreads / 32)) {
        float mMax = negInf(), sum = 0.f;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        float2 ml[kSeq];
        float4 a[kSeq];
#pragma unroll
        for (int p = 0; p < kSeq; ++p) {
            ml[p] = make_float2(negInf(), 0.f);
            if (p >= P)
                continue;
            unsigned remote;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(part), "r"(p));
            asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];"
                         : "=f"(ml[p].x), "=f"(ml[p].y)
                         : "r"(remote + HQ * kD * 4 + head * 8)
                         : "memory");
            asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                         : "=f"(a[p].x), "=f"(a[p].y), "=f"(a[p].z), "=f"(a[p].w)
                         : "r"(remote + (head * kD + lane * 4) * 4)
                         : "memory");
        }
#pragma unroll
        for (int p = 0; p < kSeq; ++p)
            if (ml[p].x != negInf()) // a CTA whose share of a short sequence is empty
                mergePiece(mMax, sum, o, ml[p], a[p]);
        storeHead(out + (long long)head * kD + lane * 4, o, sum);
    }
    clusterSync(); // no CTA leaves while another reads its shared memory
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) decode_attention_stream(float* partials, unsigned* arrivals, __nv_bfloat16* out,
    const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* block_table,
    const int* seq_lens, int B, int HQ, int PS, int MAXP, float scale)
{
    // Shared memory: the ring, the prefix sums (B + 1, padded to 16 bytes), the barriers, the scan's warp totals.
    extern __shared__ __align__(128) unsigned char smem[];
    int* prefix = reinterpret_cast<int*>(smem + STAGES * kStageBytes);
    unsigned long long* full = reinterpret_cast<unsigned long long*>(prefix + 4 * ((B + 4) / 4));
    unsigned long long* empty = full + STAGES;
    int* warpTotals = reinterpret_cast<int*>(empty + STAGES);
    const unsigned ringBase = sharedAddress(smem), fullBase = sharedAddress(full), emptyBase = sharedAddress(empty);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int C = gridDim.x, c = blockIdx.x;
    const int P = SEQ > 1 ? C / B : 1; // CTAs a sequence: the launch line's grid is B x P where SEQ > 0

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarInit(fullBase + 8 * s, 1);
            mbarInit(emptyBase + 8 * s, kHeads);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    int total, g0, g1;
    if (SEQ > 0) {
        // Sequence c / P, seen as a batch of one: its q, out and page-table row, its tokens 0 .. len - 1.
        const int b = c / P, r = c % P;
        if (tid == 0) {
            prefix[0] = 0;
            prefix[1] = seq_lens[b];
        }
        q += (long long)b * HQ * kD;
        out += (long long)b * HQ * kD;
        block_table += (long long)b * MAXP;
        B = 1;
        __syncthreads();
        total = prefix[1];
        g0 = shareStart(r, P, total);
        g1 = shareStart(r + 1, P, total);
    } else {
        // The prefix sums of the lengths, 256 sequences a step: each consumer warp scans 32, then adds the warps
        // before.
        if (tid == 0)
            prefix[0] = 0;
        for (int base = 0, carry = 0; base < B; base += kConsumerThreads) {
            int v = warp < kHeads && base + tid < B ? seq_lens[base + tid] : 0;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int n = __shfl_up_sync(0xffffffffu, v, o);
                if (lane >= o)
                    v += n;
            }
            if (lane == 31 && warp < kHeads)
                warpTotals[warp] = v;
            __syncthreads();
            int before = carry;
            for (int x = 0; x < kHeads; ++x) {
                before += x < warp ? warpTotals[x] : 0;
                carry += warpTotals[x];
            }
            if (warp < kHeads && base + tid < B)
                prefix[base + tid + 1] = before + v;
            __syncthreads();
        }
        // The merge kernel may be scheduled now; it waits for this grid's completion before reading anything.
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        total = prefix[B];
        g0 = rangeStart(c, C, total);
        g1 = rangeStart(c + 1, C, total);
        if (c == 0) {
            int* header = reinterpret_cast<int*>(partials);
            for (int i = tid; i <= B; i += kThreads)
                header[4 + i] = prefix[i];
            if (tid == 0) {
                header[0] = C;
                header[1] = total;
            }
        }
    }
    Walk w;
    bool more = walkStart(w, prefix, B, g0, g1);

    if (warp == kHeads) { // the producer: lane r < TT copies K's row r, lane TT + r V's (TT <= 16)
        unsigned long long policy = 0;
        if (EVICT)
            asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
        const int row = lane % TT;
        const __nv_bfloat16* cache = lane < TT ? k_cache : v_cache;
        const unsigned rowDst = ringBase + (lane < TT ? 0 : TT * kPitch) + row * kPitch;
        // The next tile's source rows are looked up before waiting for its stage.
        auto source = [&](const Walk& at) {
            const int token = sourceToken(at, row);
            const long long page = __ldg(block_table + (long long)at.b * MAXP + token / PS);
            return cache + (page * PS + token % PS) * (kRowBytes / 2);
        };
        const __nv_bfloat16* src = more ? source(w) : nullptr;
        for (unsigned i = 0; more; ++i) {
            const unsigned stage = i % STAGES, use = i / STAGES;
            if (use > 0)
                mbarWait(emptyBase + 8 * stage, (use - 1) & 1);
            if (lane == 0)
                mbarExpect(fullBase + 8 * stage, 2 * TT * kRowBytes);
            __syncwarp();
            if (lane < 2 * TT)
                bulkRow(rowDst + stage * kStageBytes, src, fullBase + 8 * stage, policy);
            more = walkNext(w, prefix, B, g0, g1);
            if (more)
                src = source(w);
        }
        if (SEQ > 1 && P > 1)
            mergeCluster(ringBase, out, HQ, P, warp, lane);
        return;
    }

    // A consumer: warp kvh, its G query heads; rows group and group + 8 of every fragment, a row's values spread
    // over the quad's 4 lanes.
    const int kvh = warp, group = lane / 4, quad = lane % 4;
    const int G = HQ / kHeads;
    const float scaleLog2 = scale * 1.4426950408889634f;
    int combineFirst = -1, combineLast = -1; // FUSE: the sequences whose pieces this CTA combines (of its range's ends)
    unsigned qf[kD / 16][4];
    if (more)
        loadQ(qf, q, w.b, HQ, kvh, G, group, quad);
    float m[2], l[2], acc[kDTiles][4];
    if (SEQ > 1) { // a CTA whose share of a short sequence is empty still leaves its (empty) piece
        m[0] = m[1] = negInf();
        l[0] = l[1] = 0.f;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[dt][e] = 0.f;
    }
    for (unsigned i = 0; more; ++i) {
        const unsigned stage = i % STAGES;
        const int b = w.b, t0 = w.t, valid = min(TT, w.end - w.t);
        const bool pieceStarts = t0 == w.begin, pieceEnds = t0 + TT >= w.end;
        if (pieceStarts) {
            m[0] = m[1] = negInf();
            l[0] = l[1] = 0.f;
#pragma unroll
            for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    acc[dt][e] = 0.f;
        }
        const Walk piece = w;
        more = walkNext(w, prefix, B, g0, g1);

        mbarWait(fullBase + 8 * stage, (i / STAGES) & 1);
        const unsigned kTile = ringBase + stage * kStageBytes + kvh * (kD * 2);
        const unsigned vTile = kTile + TT * kPitch;
        float s[kScoreTiles][4];
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[nt][e] = 0.f;
            const unsigned rowAt = kTile + (nt * 8 + (lane & 7)) * kPitch;
#pragma unroll
            for (int kk = 0; kk < kD / 16; kk += 2) {
                unsigned kf[4];
                loadMatrices(rowAt + (kk * 2 + lane / 8) * 16, kf);
                mma16816(s[nt], qf[kk], kf[0], kf[1]);
                mma16816(s[nt], qf[kk + 1], kf[2], kf[3]);
            }
        }
        if (pieceEnds && more) // the next piece's Q, in flight during this tile's softmax, P . V and epilogue
            loadQ(qf, q, w.b, HQ, kvh, G, group, quad);

        float rowMax[2] = { negInf(), negInf() };
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[nt][e] = nt * 8 + quad * 2 + (e & 1) < valid ? s[nt][e] * scaleLog2 : negInf();
                rowMax[e / 2] = fmaxf(rowMax[e / 2], s[nt][e]);
            }
        float base[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            rowMax[h] = fmaxf(rowMax[h], __shfl_xor_sync(0xffffffffu, rowMax[h], 1));
            rowMax[h] = fmaxf(rowMax[h], __shfl_xor_sync(0xffffffffu, rowMax[h], 2));
            const float mNew = fmaxf(m[h], rowMax[h]);
            base[h] = mNew == negInf() ? 0.f : mNew; // a row with no token yet: exp2(-inf - 0) = 0, not NaN
            const float correction = exp2f(m[h] - base[h]);
            l[h] *= correction;
            // LAZY: where no row of the warp has a new maximum every correction is exactly 1, and O is left as is.
            if (!LAZY || __any_sync(0xffffffffu, correction != 1.f))
#pragma unroll
                for (int dt = 0; dt < kDTiles; ++dt) {
                    acc[dt][2 * h] *= correction;
                    acc[dt][2 * h + 1] *= correction;
                }
            m[h] = mNew;
        }
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[nt][e] = exp2f(s[nt][e] - base[e / 2]);
                l[e / 2] += s[nt][e];
            }

        // O += P . V: score tiles 2j and 2j + 1 are the A fragment of tokens 16j .. 16j + 15 (k16), a lone tile
        // (TT = 8) the A fragment of an m16n8k8.
#pragma unroll
        for (int j = 0; j < TT / 16; ++j) {
            unsigned ph[4], pl[4];
            splitP(ph[0], pl[0], s[2 * j][0], s[2 * j][1]);
            splitP(ph[1], pl[1], s[2 * j][2], s[2 * j][3]);
            splitP(ph[2], pl[2], s[2 * j + 1][0], s[2 * j + 1][1]);
            splitP(ph[3], pl[3], s[2 * j + 1][2], s[2 * j + 1][3]);
            const unsigned rowAt = vTile + (j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kPitch;
#pragma unroll
            for (int dt = 0; dt < kDTiles; dt += 2) {
                unsigned vf[4];
                loadMatricesTransposed(rowAt + (dt + lane / 16) * 16, vf);
                mma16816(acc[dt], ph, vf[0], vf[1]);
                mma16816(acc[dt], pl, vf[0], vf[1]);
                mma16816(acc[dt + 1], ph, vf[2], vf[3]);
                mma16816(acc[dt + 1], pl, vf[2], vf[3]);
            }
        }
        if (TT % 16 != 0) {
            unsigned h0, l0, h1, l1;
            splitP(h0, l0, s[kScoreTiles - 1][0], s[kScoreTiles - 1][1]);
            splitP(h1, l1, s[kScoreTiles - 1][2], s[kScoreTiles - 1][3]);
            const unsigned rowAt = vTile + ((TT / 16) * 16 + (lane & 7)) * kPitch;
#pragma unroll
            for (int dt = 0; dt < kDTiles; dt += 4) {
                unsigned vf[4];
                loadMatricesTransposed(rowAt + (dt + lane / 8) * 16, vf);
#pragma unroll
                for (int x = 0; x < 4; ++x) {
                    mma1688(acc[dt + x], h0, h1, vf[x]);
                    mma1688(acc[dt + x], l0, l1, vf[x]);
                }
            }
        }
        __syncwarp();
        if (lane == 0)
            mbarArrive(emptyBase + 8 * stage);

        if (pieceEnds && P == 1) {
            // A whole sequence is normalised into out; a piece of one leaves (acc, m, l) in the CTA's slot for it.
            const bool whole = SEQ > 0 || wholeSequence(piece, prefix); // SEQ > 0: P == 1 here, never a slot
            float* slot = partials + headerBytes(B) / 4 + slotOf(c, C, total, prefix[b]) * HQ * (kD + 2);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
                l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
                const int row = group + 8 * h;
                if (row >= G)
                    continue;
                const int head = kvh * G + row;
                if (whole) {
                    const float inv = 1.f / l[h];
                    __nv_bfloat16* o = out + ((long long)b * HQ + head) * kD + quad * 2;
#pragma unroll
                    for (int dt = 0; dt < kDTiles; ++dt)
                        *reinterpret_cast<__nv_bfloat162*>(o + dt * 8)
                            = __floats2bfloat162_rn(acc[dt][2 * h] * inv, acc[dt][2 * h + 1] * inv);
                } else {
                    storePiece(slot, acc, h, m[h], l[h], head, HQ, quad);
                }
            }
            // The scan's warp totals are free by now.
            if (FUSE && !whole && arrivedLast(arrivals, b, prefix[b], prefix[b + 1], C, total, kvh, lane, warpTotals))
                (rangeStart(c, C, total) < prefix[b] ? combineLast : combineFirst) = b;
        }
    }
    if (FUSE)
        for (int x = 0; x < 2; ++x) {
            const int b = x == 0 ? combineFirst : combineLast;
            if (b < 0)
                continue;
            __threadfence(); // the other CTAs' pieces, read after their arrivals
            combineSequence(smem, partials + headerBytes(B) / 4, out + (long long)b * HQ * kD, prefix[b], prefix[b + 1],
                C, total, HQ, kvh, lane);
        }
    if (SEQ > 1 && P > 1) {
        // This CTA's piece into its ring, once every consumer is done reading it (every copy has landed).
        asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
        float* part = reinterpret_cast<float*>(smem);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
            l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
            const int row = group + 8 * h;
            if (row >= G)
                continue;
            storePiece(part, acc, h, m[h], l[h], kvh * G + row, HQ, quad);
        }
        mergeCluster(ringBase, out, HQ, P, warp, lane);
    }
}

// The pieces CTAs c0 .. c1 hold of a sequence, combined; a sequence one CTA held whole was written by the split
// kernel. A block of 8 warps takes 8 / W query heads of one sequence, W warps a head, four dims a lane (the launch
// line picks W, a power of two up to 8, from the pieces a sequence can have, ceil(CTAs / B) + 1, kMergeUnroll = 8 a
// warp); warp w of a head loads pieces c0 + w, c0 + w + W, ... together, and the head's first warp combines the W.
extern "C" __global__ void __launch_bounds__(256)
    decode_attention_merge(__nv_bfloat16* out, const float* partials, int B, int HQ)
{
    __shared__ float4 warpO[8][32];
    __shared__ float2 warpMl[8][32];
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int* header = reinterpret_cast<const int*>(partials);
    const int C = header[0], total = header[1];
    const int W = static_cast<int>(gridDim.x * 8LL / ((long long)B * HQ));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = warp % W;
    const long long headIndex = ((long long)blockIdx.x * 8 + warp) / W;
    const int b = static_cast<int>(headIndex / HQ), head = static_cast<int>(headIndex % HQ);
    const int lo = header[4 + b], hi = header[5 + b];
    const int c0 = rangeOwner(lo, C, total), c1 = rangeOwner(hi - 1, C, total);
    if (c0 == c1)
        return; // the whole block: its heads are of one sequence
    const float* slots = partials + headerBytes(B) / 4;
    float mMax = negInf(), sum = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    gatherPieces<kMergeUnroll>(mMax, sum, o, slots, C, total, lo, c0 + sub, c1, W, head, HQ, lane);
    if (W > 1) {
        warpO[warp][lane] = o;
        warpMl[warp][lane] = make_float2(mMax, sum);
        __syncthreads();
        if (sub != 0)
            return;
        for (int x = 1; x < W; ++x)
            if (warpMl[warp + x][lane].x != negInf())
                mergePiece(mMax, sum, o, warpMl[warp + x][lane], warpO[warp + x][lane]);
    }
    storeHead(out + headIndex * kD + lane * 4, o, sum);
}
