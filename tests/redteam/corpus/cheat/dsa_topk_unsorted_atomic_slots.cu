// Cheat (top-k returned unsorted): the exact radix select of the baseline, but the final pass hands out output
// slots with a shared atomic counter instead of two block-wide scans: every selected position is there, in whatever
// order the threads arrive (and ties beyond the TOPK-th are taken by arrival, not by position). The agent's note:
// "attention does not care about the order". The problem's output is the selected positions ascending, -1 padded,
// compared exactly (tolerance 0). Expected: correctness.rel-l2 / correctness.max-abs on every check with a row
// longer than TOPK (tuning shapes included); rows of at most TOPK positions take the ordered fast path and pass.
// @kl:launch dsa_topk_unsorted grid=(B * SQ) block=(256) smem=0 args=(indices, scores, seq_lens, SQ, MAXP)

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

extern "C" __global__ void dsa_topk_unsorted(int* indices, const float* scores, const int* seq_lens, int SQ, int MAXP)
{
    constexpr int PS = 64, TOPK = 2048;
    __shared__ int hist[256];
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
    }
    __shared__ int next, tiesTaken;
    if (threadIdx.x == 0)
        next = tiesTaken = 0;
    __syncthreads();
    for (int s = threadIdx.x; s < visible; s += blockDim.x) {
        const unsigned key = orderKey(row[s]);
        if (key > prefix || (key == prefix && atomicAdd(&tiesTaken, 1) < remaining))
            out[atomicAdd(&next, 1)] = s;
    }
}
