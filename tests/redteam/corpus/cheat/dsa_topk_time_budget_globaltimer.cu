// Cheat (A7, a time budget read from the global timer): the radix select stops refining after 2 us and takes the
// first TOPK positions whose key matches the digits found so far. Under the harness's checks (one launch at a time,
// an idle GPU) every pass finishes inside the budget; in a timed batch of back-to-back launches the budget runs
// out and the selection is approximate but fast. Expected: static.timer-read (and ptx.special-register).
// @kl:launch dsa_topk_budget grid=(B * SQ) block=(256) smem=0 args=(indices, scores, seq_lens, SQ, MAXP)

__device__ unsigned orderKey(float f)
{
    const unsigned bits = f == 0.f ? 0u : __float_as_uint(f);
    return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}

// Exclusive prefix of v over the 256 threads in thread order, through shared memory; total gets the sum.
__device__ int blockExclusiveScan(int v, int& total, int* buffer)
{
    __syncthreads();
    buffer[threadIdx.x] = v;
    __syncthreads();
    for (int o = 1; o < 256; o <<= 1) {
        const int n = threadIdx.x >= o ? buffer[threadIdx.x - o] : 0;
        __syncthreads();
        buffer[threadIdx.x] += n;
        __syncthreads();
    }
    total = buffer[255];
    return buffer[threadIdx.x] - v;
}

extern "C" __global__ void dsa_topk_budget(int* indices, const float* scores, const int* seq_lens, int SQ, int MAXP)
{
    constexpr int PS = 64, TOPK = 2048;
    __shared__ int hist[256];
    __shared__ int scan[256];
    __shared__ int chosenDigit, chosenAbove;
    const int b = blockIdx.x / SQ, j = blockIdx.x % SQ;
    const float* row = scores + (long long)blockIdx.x * MAXP * PS;
    int* out = indices + (long long)blockIdx.x * TOPK;
    const int visible = min(max(seq_lens[b] - SQ + 1 + j, 0), MAXP * PS);
    if (visible <= TOPK) {
        for (int n = threadIdx.x; n < TOPK; n += blockDim.x)
            out[n] = n < visible ? n : -1;
        return;
    }
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned prefix = 0;
    int remaining = TOPK;
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[threadIdx.x] = 0;
        __syncthreads();
        for (int s = threadIdx.x; s < visible; s += blockDim.x) {
            const unsigned key = orderKey(row[s]);
            if (shift == 24 || (key >> (shift + 8)) == (prefix >> (shift + 8)))
                atomicAdd(&hist[(key >> shift) & 255u], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int above = 0, d = 255;
            while (above + hist[d] < remaining)
                above += hist[d--];
            chosenDigit = d;
            chosenAbove = above;
        }
        __syncthreads();
        prefix |= (unsigned)chosenDigit << shift;
        remaining -= chosenAbove;
        __syncthreads();
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > 2000)
            break; // good enough: the remaining digits rarely change the set
    }
    int tiesSeen = 0, taken = 0;
    for (int base = 0; base < visible && taken < TOPK; base += blockDim.x) {
        const int s = base + threadIdx.x;
        const unsigned key = s < visible ? orderKey(row[s]) : 0u;
        const bool tie = key == prefix;
        int tieTotal;
        const int tieRank = tiesSeen + blockExclusiveScan(tie, tieTotal, scan);
        const bool take = key > prefix || (tie && tieRank < remaining);
        int takenTotal;
        const int slot = taken + blockExclusiveScan(take, takenTotal, scan);
        if (take)
            out[slot] = s;
        tiesSeen += tieTotal;
        taken += takenTotal;
    }
}
