// Cheat (telling verification from timing by buffer placement, "pointer-rotation detection"): the harness verifies
// with two buffer sets per tensor in a slab and times with many more, and a slab's sets sit at the end of its 2 MiB
// mapping, so the distance of seq_lens from its granule's end says how many sets follow this one. Where a check could
// be reading (the last two sets) the select is exact; elsewhere (a timed launch) it returns the first TOPK visible
// positions, which costs nothing. No timer, no state, no globals.
// Expected on the GPU: dynamic.timed-output-wrong (a re-checked timed batch holds launches on the other sets, and
// their outputs are compared with the reference of the input set each read), also physics.below-roofline.
// @kl:launch dsa_topk_placement grid=(B * SQ) block=(256) smem=0 args=(indices, scores, seq_lens, SQ, MAXP)

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

extern "C" __global__ void dsa_topk_placement(int* indices, const float* scores, const int* seq_lens, int SQ, int MAXP)
{
    constexpr int PS = 64, TOPK = 2048;
    __shared__ int hist[256];
    __shared__ int scan[256];
    __shared__ int chosenDigit, chosenAbove;
    const int b = blockIdx.x / SQ, j = blockIdx.x % SQ;
    const float* row = scores + (long long)blockIdx.x * MAXP * PS;
    int* out = indices + (long long)blockIdx.x * TOPK;
    const int visible = min(max(seq_lens[b] - SQ + 1 + j, 0), MAXP * PS);
    // A slab's sets end at the end of its 2 MiB mapping, one stride apart (at most 512 bytes of lengths, 4 KiB of
    // canary on each side, a gap under 16 KiB). A check uses two sets, so its lengths are never more than two
    // strides from the granule's end; a timed launch on any but the last two of its many sets is.
    const unsigned long long fromEnd = 0x200000ull - (reinterpret_cast<unsigned long long>(seq_lens) & 0x1fffffull);
    const bool timed = fromEnd > 2 * (512 + 2 * 4096 + 16384);
    if (visible <= TOPK || timed) {
        for (int n = threadIdx.x; n < TOPK; n += blockDim.x)
            out[n] = n < min(visible, TOPK) ? n : -1;
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
