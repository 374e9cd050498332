// RMSNorm for Hopper, with a decode path: when the rows are too few to give every SM a block, a row is split over a
// thread-block cluster of SPLIT blocks, so a few rows still spread over many SMs. Block r of a cluster reads vectors
// [r*S, (r+1)*S) of the row (S = ceil(H/VEC / SPLIT), the last block's slice shorter), holds them in registers as
// template.cu does (CACHE vectors of VEC elements per thread, the fewest threads that hold the slice: MINTPR at
// least, THREADS at most, THREADS / that many rows per block), and puts its per-row sum of squares in shared memory;
// after a cluster barrier every block adds the SPLIT partial sums in rank order through distributed shared memory
// (mapa + ld.shared::cluster), so all blocks of a cluster normalise with the same bits. Otherwise (T rows fill the
// SMs, or SPLIT = 1) rmsnorm_rows runs, which is template.cu without BRANCHFREE: the launch plan picks one kernel per
// shape from T, H and the SM count, so one parameter point serves decode and prefill.
// Not in problem.json's arch_templates: unverified on a GPU (tests/kernels/test_hopper_gpu.cpp RmsnormSm90Gpu).
#include <cuda_bf16.h>
// @kl:param SPLIT = 1 in [1, 2, 4, 8]
// @kl:param THREADS = 256 in [64, 128, 256, 512, 1024]
// @kl:param VEC = 8 in [2, 4, 8]
// @kl:param CACHE = 4 in [1, 2, 4, 8, 16]
// @kl:param MINTPR = 32 in [32, 64, 128, 256]
// @kl:param MINB = 1 in [1, 2]
// @kl:param PRELOAD_W = 0 in [0, 1]
// @kl:constraint MINTPR <= THREADS
// @kl:constraint VEC * CACHE <= 128
// @kl:constraint PRELOAD_W == 0 || VEC * CACHE <= 32
// @kl:launch rmsnorm_cluster grid=(SPLIT > 1 && ceil_div(T, THREADS / min(THREADS, max(MINTPR, next_pow2(ceil_div(ceil_div(ceil_div(H, VEC), 1), CACHE))))) < SM_COUNT ? SPLIT * ceil_div(T, THREADS / min(THREADS, max(MINTPR, next_pow2(ceil_div(ceil_div(ceil_div(H, VEC), SPLIT), CACHE))))) : 0) block=(THREADS) smem=0 cluster=(SPLIT, 1, 1) args=(y, x, w, T, H, eps)
// @kl:launch rmsnorm_rows grid=(SPLIT > 1 && ceil_div(T, THREADS / min(THREADS, max(MINTPR, next_pow2(ceil_div(ceil_div(ceil_div(H, VEC), 1), CACHE))))) < SM_COUNT ? 0 : ceil_div(T, THREADS / min(THREADS, max(MINTPR, next_pow2(ceil_div(ceil_div(ceil_div(H, VEC), 1), CACHE)))))) block=(THREADS) smem=0 args=(y, x, w, T, H, eps)

template <int N>
struct alignas(2 * N) BVec {
    __nv_bfloat16 v[N];
};
using V = BVec<VEC>;

__device__ __forceinline__ void normalize(V* yr, const V& wk, const V& v, int i, float inv)
{
    V out;
#pragma unroll
    for (int k = 0; k < VEC; ++k)
        out.v[k] = __float2bfloat16_rn(__bfloat162float(v.v[k]) * inv * __bfloat162float(wk.v[k]));
    yr[i] = out;
}

__device__ __forceinline__ void cluster_arrive()
{
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait()
{
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// The float at the same shared-memory offset as `local` in block `rank` of this cluster.
__device__ __forceinline__ float load_cluster(const float* local, unsigned rank)
{
    float v;
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %1, %2;\n"
                 "ld.shared::cluster.f32 %0, [remote];\n}\n"
                 : "=f"(v)
                 : "r"(static_cast<unsigned>(__cvta_generic_to_shared(local))), "r"(rank)
                 : "memory");
    return v;
}

// S blocks per row: S = SPLIT in a cluster (S, 1, 1) over a one-dimensional grid, so a block's rank is
// blockIdx.x % S; S = 1 is one block per row group.
template <int S>
__device__ __forceinline__ void rmsnorm_split(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ x,
    const __nv_bfloat16* __restrict__ w, int T, int H, float eps)
{
    const int rank = blockIdx.x % S;
    const int rowBlock = blockIdx.x / S;
    const int slice = (H / VEC + S - 1) / S;
    const int first = rank * slice;
    const int nvec = max(0, min(slice, H / VEC - first)); // this block's vectors of the row
    const int needThreads = (slice + CACHE - 1) / CACHE;
    int tpr = MINTPR; // threads per row
    while (tpr < needThreads && tpr < THREADS)
        tpr *= 2;
    const int wpr = tpr / 32;
    const int sub = threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    const long long row = (long long)rowBlock * (THREADS / tpr) + sub;
    const bool active = row < T;
    const long long rowStart = (active ? row : 0) * (long long)H + (long long)first * VEC;
    const V* xr = reinterpret_cast<const V*>(x + rowStart);
    V* yr = reinterpret_cast<V*>(y + rowStart);
    const V* wv = reinterpret_cast<const V*>(w) + first;

    // Chunks of CACHE vectors per thread; a slice that fits is one chunk. The last chunk stays in registers for
    // the write, earlier ones (slices longer than the configuration holds) are read again.
    const int chunkStep = CACHE * tpr;
    V cache[CACHE];
    // PRELOAD_W loads the first chunk's weights beside x, not after the reduction: at decode sizes that second
    // dependent round trip to memory is a large part of the kernel (H100, T=16: 4.4 -> 3.6 us), but at prefill sizes
    // it was 10% slower (T=16384: 180 -> 200 us; at the defaults 72 -> 98 registers, one block fewer per SM), so it
    // is a parameter the decode regime can pick.
    V wFirst[PRELOAD_W ? CACHE : 1];
    if constexpr (PRELOAD_W != 0) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (active && lane + c * tpr < nvec)
                wFirst[c] = wv[lane + c * tpr];
    }
    // The first chunk's loads before the loop, each next chunk's at the end of the body, as in template.cu (at its
    // loop's head they cost 11% at T=16 there).
    float ss = 0.f;
    int last = lane;
#pragma unroll
    for (int c = 0; c < CACHE; ++c)
        if (active && lane + c * tpr < nvec)
            cache[c] = xr[lane + c * tpr];
    for (int f = lane;; f += chunkStep) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (active && f + c * tpr < nvec)
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float v = __bfloat162float(cache[c].v[k]);
                    ss = fmaf(v, v, ss);
                }
        last = f;
        if (!active || f + chunkStep >= nvec)
            break;
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (f + chunkStep + c * tpr < nvec)
                cache[c] = xr[f + chunkStep + c * tpr];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (wpr > 1) {
        __shared__ float warpSum[THREADS / 32];
        const int wl = threadIdx.x % 32;
        if (wl == 0)
            warpSum[threadIdx.x / 32] = ss;
        __syncthreads();
        ss = wl < wpr ? warpSum[sub * wpr + wl] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
    }
    __shared__ float rowSum[THREADS / 32]; // this block's part of each of its rows
    if constexpr (S > 1) {
        // Every thread reaches both barriers (rows past T included): barrier.cluster counts all threads of the
        // cluster.
        if (lane == 0)
            rowSum[sub] = ss;
        cluster_arrive();
        cluster_wait(); // every block's rowSum is written and visible
        ss = 0.f;
#pragma unroll
        for (int r = 0; r < S; ++r)
            ss += load_cluster(&rowSum[sub], r);
        cluster_arrive(); // this block has read the others' rowSum; it waits for theirs before it exits
    }
    const float inv = rsqrtf(ss / (float)H + eps);
#pragma unroll
    for (int c = 0; c < CACHE; ++c)
        if (active && last + c * tpr < nvec) {
            V wk;
            if (PRELOAD_W && last == lane)
                wk = wFirst[c];
            else
                wk = wv[last + c * tpr];
            normalize(yr, wk, cache[c], last + c * tpr, inv);
        }
    for (int f = lane; f < last; f += chunkStep) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (f + c * tpr < nvec)
                cache[c] = xr[f + c * tpr];
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (f + c * tpr < nvec)
                normalize(yr, wv[f + c * tpr], cache[c], f + c * tpr, inv);
    }
    if constexpr (S > 1)
        cluster_wait(); // no block's shared memory goes away while another may still read it
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    rmsnorm_cluster(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ x,
                    const __nv_bfloat16* __restrict__ w, int T, int H, float eps)
{
    rmsnorm_split<SPLIT>(y, x, w, T, H, eps);
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    rmsnorm_rows(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ x,
                 const __nv_bfloat16* __restrict__ w, int T, int H, float eps)
{
    rmsnorm_split<1>(y, x, w, T, H, eps);
}
