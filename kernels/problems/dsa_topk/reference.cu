// Trusted reference: one block per query row (b, j). The TOPK-th largest visible score is found bit by bit from the
// top of its order key (the largest K with at least TOPK visible keys >= K: 32 counting passes) and the keys above it
// counted; then one thread walks the visible positions in order and takes every score above it and the first
// (lowest-position) ties until TOPK are taken. The order key is the float's bits made monotone, -0 first turned
// into +0. Nothing accumulates, so the worker's two builds (KL_ACC=float and double) are one kernel and the output
// is exact.
// @kl:launch dsa_topk_reference grid=(B * SQ) block=(256) smem=0 args=(indices, scores, seq_lens, SQ, MAXP)
__device__ unsigned orderKey(float f)
{
    const unsigned bits = f == 0.f ? 0u : __float_as_uint(f);
    return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}

extern "C" __global__ void dsa_topk_reference(int* indices, const float* scores, const int* seq_lens, int SQ, int MAXP)
{
    constexpr int PS = 64, TOPK = 2048;
    const int b = blockIdx.x / SQ, j = blockIdx.x % SQ;
    const float* row = scores + (long long)blockIdx.x * MAXP * PS;
    int* out = indices + (long long)blockIdx.x * TOPK;
    const int visible = min(max(seq_lens[b] - SQ + 1 + j, 0), MAXP * PS);
    __shared__ int count;
    unsigned threshold = 0;
    if (visible > TOPK)
        for (int bit = 31; bit >= 0; --bit) {
            const unsigned candidate = threshold | (1u << bit);
            __syncthreads();
            if (threadIdx.x == 0)
                count = 0;
            __syncthreads();
            int mine = 0;
            for (int s = threadIdx.x; s < visible; s += blockDim.x)
                mine += orderKey(row[s]) >= candidate;
            atomicAdd(&count, mine);
            __syncthreads();
            if (count >= TOPK)
                threshold = candidate;
        }
    // How many visible keys lie above the threshold: the ties to take are the rest of TOPK.
    __syncthreads();
    if (threadIdx.x == 0)
        count = 0;
    __syncthreads();
    int mine = 0;
    for (int s = threadIdx.x; s < visible; s += blockDim.x)
        mine += orderKey(row[s]) > threshold;
    atomicAdd(&count, mine);
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    int n = 0;
    if (visible <= TOPK) {
        for (; n < visible; ++n)
            out[n] = n;
    } else {
        int ties = TOPK - count;
        for (int s = 0; s < visible && n < TOPK; ++s) {
            const unsigned key = orderKey(row[s]);
            if (key > threshold || (key == threshold && ties-- > 0))
                out[n++] = s;
        }
    }
    for (; n < TOPK; ++n)
        out[n] = -1;
}
