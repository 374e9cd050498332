// Tunable top-k: one CTA per query row, an exact radix select on the scores' order keys (the float's bits made
// monotone, -0 turned into +0), BITS bits per counting pass from the top (ceil(32 / BITS) passes, a 2^BITS-bin
// shared histogram of the keys still matching the digits chosen so far), then one ordered pass that writes every
// key above the TOPK-th largest and the lowest-position ties, in position order, through two block-wide scans per
// chunk of THREADS * VEC positions. Every pass reads the row from memory (or L2): a row that fits shared memory could
// be read once; rows of short contexts leave most SMs idle at small B * SQ (a split of the row over a cluster fixes
// both).
// @kl:param THREADS = 512 in [128, 256, 512, 1024]
// @kl:param BITS = 8 in [4, 6, 8, 10, 11]
// @kl:param VEC = 4 in [1, 2, 4]
// @kl:launch dsa_topk_template grid=(B * SQ) block=(THREADS) smem=0 args=(indices, scores, seq_lens, SQ, MAXP)

__device__ __forceinline__ unsigned orderKey(float f)
{
    const unsigned bits = f == 0.f ? 0u : __float_as_uint(f);
    return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}

// Exclusive prefix of v over the CTA's threads in thread order; total gets the sum. Every thread must call it.
__device__ __forceinline__ int blockExclusiveScan(int v, int& total, int* warpTotals)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int inclusive = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o)
            inclusive += n;
    }
    __syncthreads();
    if (lane == 31)
        warpTotals[warp] = inclusive;
    __syncthreads();
    int before = 0;
    total = 0;
    for (int w = 0; w < THREADS / 32; ++w) {
        const int t = warpTotals[w];
        before += w < warp ? t : 0;
        total += t;
    }
    return before + inclusive - v;
}

template <int N>
struct alignas(4 * N) FVec {
    float v[N];
};

extern "C" __global__ void __launch_bounds__(THREADS)
    dsa_topk_template(int* __restrict__ indices, const float* __restrict__ scores, const int* __restrict__ seq_lens,
                      int SQ, int MAXP)
{
    constexpr int PS = 64, TOPK = 2048, R = 1 << BITS, PASSES = (32 + BITS - 1) / BITS;
    __shared__ int hist[R];
    __shared__ int warpTotals[32];
    __shared__ int chosenDigit, chosenAbove;
    const int b = blockIdx.x / SQ, j = blockIdx.x % SQ;
    const float* row = scores + (long long)blockIdx.x * MAXP * PS;
    int* out = indices + (long long)blockIdx.x * TOPK;
    const int visible = min(max(seq_lens[b] - SQ + 1 + j, 0), MAXP * PS);
    if (visible <= TOPK) {
        for (int n = threadIdx.x; n < TOPK; n += THREADS)
            out[n] = n < visible ? n : -1;
        return;
    }
    const FVec<VEC>* vrow = reinterpret_cast<const FVec<VEC>*>(row);
    const int nvec = (visible + VEC - 1) / VEC; // the row is MAXP * 64 floats: the last vector is in bounds

    unsigned prefix = 0;
    int remaining = TOPK; // how many of the keys matching prefix are still to take
#pragma unroll 1
    for (int p = 0; p < PASSES; ++p) {
        const int hi = 32 - p * BITS, lo = hi > BITS ? hi - BITS : 0;
        for (int d = threadIdx.x; d < R; d += THREADS)
            hist[d] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < nvec; i += THREADS) {
            const FVec<VEC> f = vrow[i];
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const unsigned key = orderKey(f.v[e]);
                const bool matches = hi == 32 || (key >> hi) == (prefix >> hi);
                if (i * VEC + e < visible && matches)
                    atomicAdd(&hist[(key >> lo) & ((1u << (hi - lo)) - 1u)], 1);
            }
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            // Lane l owns a run of bins; suffix sums over the lanes find the digit holding the remaining-th key.
            const int lane = threadIdx.x, per = (R + 31) / 32, first = min(lane * per, R), last = min(first + per, R);
            int own = 0;
            for (int d = first; d < last; ++d)
                own += hist[d];
            int suffix = own;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int n = __shfl_down_sync(0xffffffffu, suffix, o);
                if (lane + o < 32)
                    suffix += n;
            }
            int above = suffix - own;
            if (above < remaining && remaining <= suffix)
                for (int d = last - 1; d >= first; --d) {
                    if (above + hist[d] >= remaining) {
                        chosenDigit = d;
                        chosenAbove = above;
                        break;
                    }
                    above += hist[d];
                }
        }
        __syncthreads();
        prefix |= (unsigned)chosenDigit << lo;
        remaining -= chosenAbove;
        __syncthreads();
    }

    // prefix is the TOPK-th largest key; remaining of its ties (the lowest positions) are taken.
    const unsigned threshold = prefix;
    int tiesSeen = 0, taken = 0;
    for (int base = 0; base < nvec && taken < TOPK; base += THREADS) {
        const int i = base + threadIdx.x;
        unsigned key[VEC];
        FVec<VEC> f;
        if (i < nvec)
            f = vrow[i];
        int ties = 0;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            key[e] = i < nvec && i * VEC + e < visible ? orderKey(f.v[e]) : 0u;
            ties += key[e] == threshold;
        }
        int tieTotal;
        int tieRank = tiesSeen + blockExclusiveScan(ties, tieTotal, warpTotals);
        bool take[VEC];
        int mine = 0;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            take[e] = key[e] > threshold || (key[e] == threshold && tieRank++ < remaining);
            mine += take[e];
        }
        int takenTotal;
        int slot = taken + blockExclusiveScan(mine, takenTotal, warpTotals);
#pragma unroll
        for (int e = 0; e < VEC; ++e)
            if (take[e])
                out[slot++] = i * VEC + e;
        tiesSeen += tieTotal;
        taken += takenTotal;
    }
}
