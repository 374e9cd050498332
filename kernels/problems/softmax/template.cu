// Tunable softmax, read once and written once. A row is held by the fewest threads that hold it, CACHE
// vectors of VEC halves each (VEC=8 is 16 bytes), at least MINTPR threads (a warp: no barrier) and at most
// THREADS; rows longer than a CTA holds are split over up to CLUSTER CTAs of a thread-block cluster that
// combine their partial (max, sum) through distributed shared memory. The split is chosen from C at run
// time, by the same formula in the launch line and in the kernel.
// PIPE=1 stages rows in shared memory with cp.async, two buffers deep: each row group handles SEQ consecutive
// rows and the next row's loads are in flight while the current row is reduced and written (on the H200 this
// wins for rows of 4096, and loses for rows of 32768+, where two row buffers per CTA leave too few CTAs per SM).
// Clusters need sm_90 (the default CLUSTER=1 runs everywhere; the tuner tries 2..8 where ARCH allows).
// Before sm_80 there is no cp.async: PIPE=1 stages with plain loads and stores, without the overlap.
// PIPE=0 loads into registers, one row per group. Rows longer than THREADS*VEC*CACHE*CLUSTER are read in
// chunks (online max and sum) and, except the last chunk, read a second time (from L2).
// RING=1 (sm_90) is the long-row path: blocks (built for BPS per SM) stream rows through a shared-memory ring
// of STAGES chunks of CHUNK halves, fed by one producer thread with bulk copies (cp.async.bulk, each chunk's mbarrier
// counting its bytes), while THREADS consumer threads keep an online max and sum per thread as chunks land. A row
// slice of at most STAGES chunks stays in the ring and is written from there (one HBM read and one write); a longer
// one is streamed through the ring a second time for the output. CLUSTER > 1 splits each row over the cluster's
// blocks, a slice each, which send their (max, sum) to every peer with st.async on the peer's mbarrier.
// PERSIST=0 (the default) launches a block, or a cluster, per row, and the GPU hands rows to blocks as they free up;
// PERSIST=1 launches BPS blocks per SM that walk the rows, which assumes every cluster is resident at once. On an H100
// a block per row runs C=32768 R=4096 in 182.2 us (98% of copy) against 192.3 persistent, and C=131072 R=1024 over
// clusters of four in 187.7 us (95%) against about 232 for a persistent grid of those clusters and 230 for the register
// path over clusters of eight. Short rows lose (C=4096 R=32768: 257 us against 205 persistent and 181 for the register
// path): each block fills its ring and sets up its barriers for one row. On the H200 the persistent ring ran C=32768 in
// 147.6 us (85%) and C=131072 over clusters of two in 169.5.
#include <cuda_fp16.h>
// @kl:param THREADS = 256 in [128, 256, 512, 1024]
// @kl:param VEC = 8 in [4, 8]
// @kl:param CACHE = 4 in [2, 4, 8, 16]
// @kl:param CLUSTER = 1 in [1, 2, 4, 8]
// @kl:param MINTPR = 128 in [32, 128]
// @kl:param MINB = 1 in [1, 2, 4]
// @kl:param PIPE = 1 in [0, 1]
// @kl:param SEQ = 2 in [1, 2, 4]
// @kl:constraint CLUSTER == 1 || ARCH >= 90
// @kl:constraint MINTPR <= THREADS
// @kl:constraint PIPE == 1 || (VEC * CACHE / 2 + 24) * THREADS * MINB <= 65536
// @kl:constraint PIPE == 0 || 40 * THREADS * MINB <= 65536
// @kl:constraint PIPE == 1 || SEQ == 1
// @kl:constraint PIPE == 0 || THREADS * CACHE * VEC <= 32768
// @kl:param RING = 0 in [0, 1]
// @kl:param CHUNK = 8192 in [2048, 4096, 8192]
// @kl:param STAGES = 4 in [2, 4, 8, 12]
// @kl:param BPS = 3 in [1, 2, 3]
// @kl:param PERSIST = 0 in [0, 1]
// The ring's parameters are fixed off the ring and the register path's on it: each kernel is one point once.
// @kl:constraint RING == 0 || ARCH >= 90
// @kl:constraint RING == 1 || (CHUNK == 8192 && STAGES == 4 && BPS == 3 && PERSIST == 0)
// @kl:constraint RING == 0 || (VEC == 8 && CACHE == 4 && MINTPR == 128 && MINB == 1 && PIPE == 1 && SEQ == 2)
// @kl:constraint RING == 0 || (THREADS >= 256 && THREADS <= 512 && CHUNK % (8 * THREADS) == 0)
// @kl:constraint RING == 0 || (STAGES * CHUNK * 2 <= 200 * 1024 && BPS * (STAGES * CHUNK * 2 + 2048) <= 233472)
// Three blocks of 544 threads leave 32 registers a thread, and the ring spills there.
// @kl:constraint RING == 0 || BPS * (THREADS + 32) <= 1152
// @kl:launch softmax_template grid=(RING ? 0 : CLUSTER * ceil_div(R, SEQ * (CLUSTER / min(CLUSTER, next_pow2(ceil_div(C, VEC * CACHE * THREADS)))) * (THREADS / min(THREADS, max(MINTPR, next_pow2(ceil_div(C, VEC * CACHE))))))) block=(THREADS) smem=(PIPE * 2 * THREADS * CACHE * VEC * 2) args=(y, x, R, C)
// @kl:launch softmax_ring grid=(RING ? CLUSTER * (PERSIST ? min(R, max(1, div(SM_COUNT * BPS, CLUSTER))) : R) : 0) block=(THREADS + 32) smem=(RING * STAGES * CHUNK * 2) args=(y, x, R, C)

template <int N>
struct alignas(2 * N) HVec {
    __half v[N];
};
using V = HVec<VEC>;
constexpr float kLog2e = 1.4426950408889634f;
// Pairs one lane gathers when a row's warps (and CTAs) combine: at most CLUSTER x warps per CTA.
constexpr int kPairsPerLane = (CLUSTER * THREADS / 32 + 31) / 32;

__device__ __forceinline__ float negInf() { return __int_as_float(0xff800000); }

// exp2 on the special-function unit; (x - max) is formed exactly in fp32 first, so accuracy stays fp32-like.
__device__ __forceinline__ float fastExp2(float v)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

__device__ __forceinline__ float scaledExp(float x, float m) { return fastExp2((x - m) * kLog2e); }

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2)
{
    const float mm = fmaxf(m, m2);
    if (mm == negInf())
        return;
    s = s * scaledExp(m, mm) + s2 * scaledExp(m2, mm);
    m = mm;
}

// get(c) is the thread's c-th vector of the chunk (registers, or shared memory read afresh each time).
template <int N, typename Get>
__device__ __forceinline__ void chunkStats(Get get, int first, int step, int nvec, bool active, float& m, float& s)
{
    m = negInf();
    s = 0.f;
#pragma unroll
    for (int c = 0; c < N; ++c)
        if (active && first + c * step < nvec) {
            const V v = get(c);
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                m = fmaxf(m, __half2float(v.v[k]));
        }
    if (m == negInf())
        return;
#pragma unroll
    for (int c = 0; c < N; ++c)
        if (active && first + c * step < nvec) {
            const V v = get(c);
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                s += scaledExp(__half2float(v.v[k]), m);
        }
}

template <int N, typename Get>
__device__ __forceinline__ void writeChunk(V* yr, Get get, int first, int step, int nvec, bool active, float m,
                                           float inv)
{
#pragma unroll
    for (int c = 0; c < N; ++c) {
        const int i = first + c * step;
        if (active && i < nvec) {
            const V v = get(c);
            V out;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                out.v[k] = __float2half_rn(scaledExp(__half2float(v.v[k]), m) * inv);
            yr[i] = out;
        }
    }
}

__device__ __forceinline__ unsigned sharedAddress(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ unsigned peerAddress(unsigned local, unsigned rank)
{
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
}

// A shared-memory read the compiler may not merge with an earlier one: the staged row stays in shared memory
// instead of being copied into registers (which would cap the threads per SM).
__device__ __forceinline__ V loadStaged(const V* p)
{
    const unsigned a = sharedAddress(p);
    V v;
    if constexpr (sizeof(V) == 16) {
        uint4 u;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "r"(a));
        *reinterpret_cast<uint4*>(&v) = u;
    } else {
        uint2 u;
        asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(u.x), "=r"(u.y) : "r"(a));
        *reinterpret_cast<uint2*>(&v) = u;
    }
    return v;
}

__device__ __forceinline__ void clusterSync()
{
    __syncwarp();
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ float2 loadFromCta(const float2* p, unsigned rank)
{
    const unsigned remote = peerAddress(sharedAddress(p), rank);
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
    return v;
}

#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ void copyAsync(V* dst, const V* src)
{
    const unsigned s = sharedAddress(dst);
    if constexpr (sizeof(V) == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(src), "n"(sizeof(V)) : "memory");
}

__device__ __forceinline__ void commitCopies() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int Pending>
__device__ __forceinline__ void waitCopies()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}
#else
__device__ __forceinline__ void copyAsync(V* dst, const V* src) { *dst = *src; }

__device__ __forceinline__ void commitCopies() {}

// Each thread reads back only what it stored; the clobber keeps the stores ahead of loadStaged's asm.
template <int Pending>
__device__ __forceinline__ void waitCopies()
{
    asm volatile("" ::: "memory");
}
#endif

// Row max and sum over the row's warps (and CTAs); partials are double-buffered by row parity, so a warp that
// runs ahead into the next row never overwrites a partial another warp still reads.
__device__ __forceinline__ void rowReduce(float m, float s, float2 (*warpPart)[THREADS / 32], int parity, int wpr,
                                          int cpr, int sub, int rank, int part, float& rowMax, float& rowSum)
{
    rowMax = m;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        rowMax = fmaxf(rowMax, __shfl_xor_sync(0xffffffffu, rowMax, o));
    rowSum = m == negInf() ? 0.f : s * scaledExp(m, rowMax);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        rowSum += __shfl_xor_sync(0xffffffffu, rowSum, o);
    if (wpr == 1 && cpr == 1)
        return;
    const int wl = threadIdx.x % 32;
    if (wl == 0)
        warpPart[parity][threadIdx.x / 32] = make_float2(rowMax, rowSum);
    if (cpr > 1)
        clusterSync();
    else
        __syncthreads();
    // Lane wl gathers pairs wl, wl + 32, ... of the row's cpr x wpr (CTA, warp) partials.
    float pm[kPairsPerLane], ps[kPairsPerLane];
    rowMax = negInf();
#pragma unroll
    for (int j = 0; j < kPairsPerLane; ++j) {
        const int k = wl + 32 * j;
        float2 p = make_float2(negInf(), 0.f);
        if (k < cpr * wpr) {
            const float2* slot = &warpPart[parity][sub * wpr + k % wpr];
            p = cpr > 1 ? loadFromCta(slot, rank - part + k / wpr) : *slot;
        }
        pm[j] = p.x;
        ps[j] = p.y;
        rowMax = fmaxf(rowMax, p.x);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        rowMax = fmaxf(rowMax, __shfl_xor_sync(0xffffffffu, rowMax, o));
    rowSum = 0.f;
#pragma unroll
    for (int j = 0; j < kPairsPerLane; ++j)
        if (pm[j] != negInf())
            rowSum += ps[j] * scaledExp(pm[j], rowMax);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        rowSum += __shfl_xor_sync(0xffffffffu, rowSum, o);
}

#if CLUSTER > 1
#define KL_CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define KL_CLUSTER_DIMS
#endif

extern "C" __global__ void KL_CLUSTER_DIMS __launch_bounds__(THREADS, MINB)
    softmax_template(__half* __restrict__ y, const __half* __restrict__ x, int R, int C)
{
#if !RING
    __shared__ float2 warpPart[2][THREADS / 32];
    const int nvec = C / VEC;
    const int needThreads = (nvec + CACHE - 1) / CACHE;
    int tpr = MINTPR; // threads per row in one CTA
    while (tpr < needThreads && tpr < THREADS)
        tpr *= 2;
    int cpr = 1; // CTAs per row
    while (cpr * THREADS < needThreads && cpr < CLUSTER)
        cpr *= 2;
    const int wpr = tpr / 32;
    const int rank = blockIdx.x % CLUSTER;
    const int part = rank % cpr;
    const int sub = threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    const long long rowBase =
        (((long long)(blockIdx.x / CLUSTER) * (CLUSTER / cpr) + rank / cpr) * (THREADS / tpr) + sub) * SEQ;
    const int step = tpr * cpr;
    const int first = part * tpr + lane;

#if PIPE
    if (nvec <= CACHE * step) {
        extern __shared__ V stage[]; // [2 buffers][CACHE][THREADS]: each thread reads back only what it copied
        auto issue = [&](int j) {
            const long long row = rowBase + j;
            if (row < R) {
                const V* xr = reinterpret_cast<const V*>(x + row * (long long)C);
#pragma unroll
                for (int c = 0; c < CACHE; ++c)
                    if (first + c * step < nvec)
                        copyAsync(&stage[((j & 1) * CACHE + c) * THREADS + threadIdx.x], xr + first + c * step);
            }
            commitCopies(); // an empty group too: the count of pending groups stays uniform
        };
        issue(0);
#pragma unroll 1
        for (int j = 0; j < SEQ; ++j) {
            if (j + 1 < SEQ) {
                issue(j + 1);
                waitCopies<1>();
            } else {
                waitCopies<0>();
            }
            const long long row = rowBase + j;
            const bool active = row < R;
            const V* mine = &stage[(j & 1) * CACHE * THREADS + threadIdx.x];
            auto staged = [&](int c) { return loadStaged(mine + c * THREADS); };
            float m, s, rowMax, rowSum;
            chunkStats<CACHE>(staged, first, step, nvec, active, m, s);
            rowReduce(m, s, warpPart, j & 1, wpr, cpr, sub, rank, part, rowMax, rowSum);
            V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * (long long)C);
            writeChunk<CACHE>(yr, staged, first, step, nvec, active, rowMax, 1.f / rowSum);
        }
    } else
#endif
    {
        // With PIPE the rows that fit are staged in shared memory; only longer rows come here, in small register
        // chunks so that this path does not set the register count of the kernel.
        constexpr int kRegChunk = PIPE && CACHE > 2 ? 2 : CACHE;
        const int regStep = kRegChunk * step;
#pragma unroll 1
        for (int j = 0; j < SEQ; ++j) {
            const long long row = rowBase + j;
            const bool active = row < R;
            const V* xr = reinterpret_cast<const V*>(x + (active ? row : 0) * (long long)C);
            V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * (long long)C);
            // Chunks of CACHE vectors per thread; a row that fits is one chunk. The last chunk stays in
            // registers for the write, earlier ones (rows longer than the configuration holds) are read again.
            V cache[kRegChunk] = {};
            auto cached = [&cache](int c) { return cache[c]; };
            float m = negInf(), s = 0.f;
            int last = first;
            for (int f = first;; f += regStep) {
#pragma unroll
                for (int c = 0; c < kRegChunk; ++c)
                    if (active && f + c * step < nvec)
                        cache[c] = xr[f + c * step];
                float m2, s2;
                chunkStats<kRegChunk>(cached, f, step, nvec, active, m2, s2);
                if (f == first) {
                    m = m2;
                    s = s2;
                } else {
                    merge(m, s, m2, s2);
                }
                last = f;
                if (!active || f + regStep >= nvec)
                    break;
            }
            float rowMax, rowSum;
            rowReduce(m, s, warpPart, j & 1, wpr, cpr, sub, rank, part, rowMax, rowSum);
            const float inv = 1.f / rowSum;
            writeChunk<kRegChunk>(yr, cached, last, step, nvec, active, rowMax, inv);
            for (int f = first; f < last; f += regStep) {
#pragma unroll
                for (int c = 0; c < kRegChunk; ++c)
                    if (f + c * step < nvec)
                        cache[c] = xr[f + c * step];
                writeChunk<kRegChunk>(yr, cached, f, step, nvec, true, rowMax, inv);
            }
        }
    }
    // No CTA may exit while a peer can still read its shared memory.
    if (cpr > 1) {
        __syncwarp();
        asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
    }
#endif
}

// The ring's chunks are read as 16-byte vectors whatever VEC is.
using RingVec = HVec<8>;
constexpr int kRingVecs = CHUNK / 8;
constexpr int kRingPerThread = kRingVecs / THREADS; // a whole number by the constraint CHUNK % (8 * THREADS) == 0
constexpr int kRingWarps = THREADS / 32;

// The vectors of chunk k of a row of C halves (the last chunk may be short).
__device__ __forceinline__ int ringChunkVecs(int k, int C) { return min(kRingVecs, (C - k * CHUNK) / 8); }

__device__ __forceinline__ float vecMax(const RingVec& v)
{
    float m = __half2float(v.v[0]);
#pragma unroll
    for (int i = 1; i < 8; ++i)
        m = fmaxf(m, __half2float(v.v[i]));
    return m;
}

__device__ __forceinline__ float fastLog2(float v)
{
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

__device__ __forceinline__ void mbarInit(unsigned long long* bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sharedAddress(bar)), "r"(count));
}

__device__ __forceinline__ void mbarArrive(unsigned long long* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sharedAddress(bar)) : "memory");
}

__device__ __forceinline__ void mbarExpect(unsigned long long* bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sharedAddress(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbarWait(unsigned long long* bar, unsigned parity)
{
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(sharedAddress(bar)),
                 "r"(parity)
                 : "memory");
}

// The wait for what the cluster's peers sent: their st.async completes with release at cluster scope, so the
// acquire has to be at cluster scope too.
__device__ __forceinline__ void mbarWaitCluster(unsigned long long* bar, unsigned parity)
{
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(sharedAddress(bar)),
                 "r"(parity)
                 : "memory");
}

// bytes (a multiple of 16) from global src into shared dst, counted on bar, which expects them.
__device__ __forceinline__ void bulkLoad(void* dst, const void* src, unsigned bytes, unsigned long long* bar)
{
    mbarExpect(bar, bytes);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(sharedAddress(dst)), "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(sharedAddress(bar))
                 : "memory");
}

// The consumer threads only (the producer warp does not take part): named barrier 1.
__device__ __forceinline__ void consumersSync() { asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory"); }

extern "C" __global__ void KL_CLUSTER_DIMS __launch_bounds__(THREADS + 32, BPS)
    softmax_ring(__half* __restrict__ y, const __half* __restrict__ x, int R, int C)
{
#if RING && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char ringBytes[];
    RingVec* ring = reinterpret_cast<RingVec*>(ringBytes);
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES], peersIn[2];
    __shared__ float2 warpPart[2][kRingWarps]; // by row parity: a warp a row ahead never overwrites what others read
    __shared__ float2 ctaPart[2][CLUSTER]; // by row parity: each block's (max, sum) of the row, sent by the block
    // Ring slot g (counted over the block's whole walk) is stage g % STAGES, its use g / STAGES: consumers wait for
    // that use's parity on full[stage], the producer for the previous use's parity on empty[stage].
    const int chunks = (C + CHUNK - 1) / CHUNK;
    const int slice = (chunks + CLUSTER - 1) / CLUSTER; // chunks per block of the cluster
    const int part = blockIdx.x % CLUSTER;
    const int firstChunk = min(chunks, part * slice);
    const int myChunks = min(chunks, firstChunk + slice) - firstChunk;
    const bool kept = slice <= STAGES; // the slice stays in the ring for the output
    const int rowStep = gridDim.x / CLUSTER;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarInit(&full[s], 1);
            mbarInit(&empty[s], THREADS);
        }
        mbarInit(&peersIn[0], 1);
        mbarInit(&peersIn[1], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if constexpr (CLUSTER > 1) // every peer's barriers exist before any block sends to them
        clusterSync();
    else
        __syncthreads();

    if (threadIdx.x >= THREADS) { // the producer: the same walk of slots as the consumers, STAGES ahead at most
        if (threadIdx.x != THREADS)
            return;
        unsigned g = 0;
        for (int row = blockIdx.x / CLUSTER; row < R; row += rowStep)
            for (int pass = 0; pass < (kept ? 1 : 2); ++pass)
                for (int k = firstChunk; k < firstChunk + myChunks; ++k, ++g) {
                    const unsigned stage = g % STAGES, use = g / STAGES;
                    if (use > 0)
                        mbarWait(&empty[stage], (use - 1) & 1);
                    const int first = k * CHUNK;
                    const unsigned bytes = static_cast<unsigned>(min(CHUNK, C - first)) * 2u;
                    bulkLoad(ring + stage * kRingVecs, x + (long long)row * C + first, bytes, &full[stage]);
                }
        return;
    }

    const int t = threadIdx.x;
    unsigned g = 0;
    int walk = 0; // rows this block has taken
    for (int row = blockIdx.x / CLUSTER; row < R; row += rowStep, ++walk) {
        const int parity = walk & 1;
        // Pass 1: this thread's online max and sum over vectors t, t + THREADS, ... of every chunk of the slice.
        float m = negInf(), s = 0.f;
        for (int k = 0; k < myChunks; ++k) {
            const unsigned slot = g + k, stage = slot % STAGES;
            mbarWait(&full[stage], (slot / STAGES) & 1);
            const int nv = ringChunkVecs(firstChunk + k, C);
            const RingVec* chunk = ring + stage * kRingVecs;
            // The thread's vectors of the chunk are held in registers for its max and then its sum against the
            // running max: one exp per element and one per chunk.
            RingVec v[kRingPerThread];
            float cm = m;
#pragma unroll
            for (int j = 0; j < kRingPerThread; ++j)
                if (t + j * THREADS < nv) {
                    v[j] = chunk[t + j * THREADS];
                    cm = fmaxf(cm, vecMax(v[j]));
                }
            if (cm != negInf()) {
                s = m == negInf() ? 0.f : s * scaledExp(m, cm);
                m = cm;
#pragma unroll
                for (int j = 0; j < kRingPerThread; ++j)
                    if (t + j * THREADS < nv)
#pragma unroll
                        for (int i = 0; i < 8; ++i)
                            s += scaledExp(__half2float(v[j].v[i]), m);
            }
            if (!kept)
                mbarArrive(&empty[stage]);
        }
        // The slice's max and sum: over the warp, then over the warps in a fixed order (every thread gets the same).
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
        if (t % 32 == 0)
            warpPart[parity][t / 32] = make_float2(m, s);
        consumersSync();
        float rowMax = negInf(), rowSum = 0.f;
#pragma unroll
        for (int w = 0; w < kRingWarps; ++w)
            merge(rowMax, rowSum, warpPart[parity][w].x, warpPart[parity][w].y);
        if constexpr (CLUSTER > 1) {
            // Every block sends its pair into slot [parity][part] of every block, counted on that block's peersIn:
            // a block sends row walk + 2's pair only after every peer's pair of walk + 1 has come, which each peer
            // sends after reading walk's pairs, so a slot is never overwritten while it is read.
            if (t == 0) {
                mbarExpect(&peersIn[parity], CLUSTER * sizeof(float2));
                const unsigned slotAddr = sharedAddress(&ctaPart[parity][part]);
                const unsigned barAddr = sharedAddress(&peersIn[parity]);
                for (int r = 0; r < CLUSTER; ++r)
                    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
                                 ::"r"(peerAddress(slotAddr, r)), "f"(rowMax), "f"(rowSum), "r"(peerAddress(barAddr, r))
                                 : "memory");
            }
            mbarWaitCluster(&peersIn[parity], (walk >> 1) & 1);
            rowMax = negInf();
            rowSum = 0.f;
#pragma unroll
            for (int r = 0; r < CLUSTER; ++r)
                merge(rowMax, rowSum, ctaPart[parity][r].x, ctaPart[parity][r].y);
        }
        // Pass 2: the output, from the chunks still in the ring or from a second stream of the slice; 1 / sum is
        // folded into the exponent.
        const float bias = -fastLog2(rowSum);
        if (!kept)
            g += myChunks;
        __half* yr = y + (long long)row * C;
        for (int k = 0; k < myChunks; ++k) {
            const unsigned slot = g + k, stage = slot % STAGES;
            if (!kept)
                mbarWait(&full[stage], (slot / STAGES) & 1);
            const int nv = ringChunkVecs(firstChunk + k, C);
            const RingVec* chunk = ring + stage * kRingVecs;
            RingVec* out = reinterpret_cast<RingVec*>(yr + (firstChunk + k) * CHUNK);
#pragma unroll
            for (int j = 0; j < kRingPerThread; ++j)
                if (t + j * THREADS < nv) {
                    const RingVec v = chunk[t + j * THREADS];
                    RingVec o;
#pragma unroll
                    for (int i = 0; i < 8; ++i)
                        o.v[i] = __float2half_rn(fastExp2(fmaf(__half2float(v.v[i]) - rowMax, kLog2e, bias)));
                    out[t + j * THREADS] = o;
                }
            mbarArrive(&empty[stage]);
        }
        g += myChunks;
    }
#endif
}

