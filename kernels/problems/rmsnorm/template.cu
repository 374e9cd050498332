// Tunable RMSNorm, read once and written once: a row is held in registers, CACHE vectors of VEC elements per
// thread (VEC=8 is 16 bytes), by the fewest threads that hold it (MINTPR at least, THREADS at most), so every
// thread keeps CACHE independent loads in flight and a CTA runs THREADS / that many rows. The split is chosen
// from H at run time, by the same formula in the launch line and in the kernel. Rows longer than
// THREADS*VEC*CACHE are read in chunks and, except the last chunk, read again (from L2) to write.
#include <cuda_bf16.h>
// @kl:param THREADS = 256 in [64, 128, 256, 512, 1024]
// @kl:param VEC = 8 in [2, 4, 8]
// @kl:param CACHE = 4 in [1, 2, 4, 8, 16]
// @kl:param MINTPR = 32 in [32, 64, 128, 256]
// @kl:param MINB = 1 in [1, 2]
// @kl:param PRELOAD_W = 0 in [0, 1]
// @kl:constraint MINTPR <= THREADS
// @kl:constraint VEC * CACHE <= 128
// @kl:constraint PRELOAD_W == 0 || VEC * CACHE <= 32
// @kl:param BRANCHFREE = 0 in [0, 1]
// @kl:launch rmsnorm_template grid=(ceil_div(T, THREADS / min(THREADS, max(MINTPR, next_pow2(ceil_div(H, VEC * CACHE)))))) block=(THREADS) smem=0 args=(y, x, w, T, H, eps)

template <int N>
struct alignas(2 * N) BVec {
    __nv_bfloat16 v[N];
};
using V = BVec<VEC>;

__device__ __forceinline__ V normalized(const V& wk, const V& v, float inv)
{
    V out;
#pragma unroll
    for (int k = 0; k < VEC; ++k)
        out.v[k] = __float2bfloat16_rn(__bfloat162float(v.v[k]) * inv * __bfloat162float(wk.v[k]));
    return out;
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    rmsnorm_template(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ x,
                     const __nv_bfloat16* __restrict__ w, int T, int H, float eps)
{
    const int nvec = H / VEC;
    const int needThreads = (nvec + CACHE - 1) / CACHE;
    int tpr = MINTPR; // threads per row
    while (tpr < needThreads && tpr < THREADS)
        tpr *= 2;
    const int wpr = tpr / 32;
    const int sub = threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    const long long row = (long long)blockIdx.x * (THREADS / tpr) + sub;
    const bool active = row < T;
    const V* xr = reinterpret_cast<const V*>(x + (active ? row : 0) * (long long)H);
    V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * (long long)H);
    const V* wv = reinterpret_cast<const V*>(w);

    // Chunks of CACHE vectors per thread; a row that fits is one chunk. The last chunk stays in registers for
    // the write, earlier ones (rows longer than the configuration holds) are read again.
    const int chunkStep = CACHE * tpr;
    V cache[CACHE];
    // PRELOAD_W loads the first chunk's weights beside x, not after the reduction: at decode sizes that second
    // dependent round trip to memory is a large part of the kernel (H100, T=16: 4.4 -> 3.6 us), but at prefill sizes
    // it was 10% slower (T=16384: 180 -> 200 us; at the defaults 72 -> 98 registers, one block fewer per SM), so it
    // is a parameter the decode regime can pick.
    V wFirst[PRELOAD_W ? CACHE : 1];
    if constexpr (PRELOAD_W != 0) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            if (BRANCHFREE)
                wFirst[c] = V {};
            if (active && lane + c * tpr < nvec)
                wFirst[c] = wv[lane + c * tpr];
        }
    }
    // The first chunk's loads come before the loop and each next chunk's at the end of the body: with the loads at
    // the loop's head a row that fits (every decode row) took 11% longer at T=16 on an H100 (3.30 -> 2.95 us).
    // BRANCHFREE gives a vector past the row's end zeros, so the sum needs no branch per vector, and a row that fits
    // normalises with the preloaded weights without one (H100, T=16: 2.96 -> 2.85 us).
    float ss = 0.f;
    int last = lane;
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        if (BRANCHFREE)
            cache[c] = V {};
        if (active && lane + c * tpr < nvec)
            cache[c] = xr[lane + c * tpr];
    }
    for (int f = lane;; f += chunkStep) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (BRANCHFREE || (active && f + c * tpr < nvec))
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float v = __bfloat162float(cache[c].v[k]);
                    ss = fmaf(v, v, ss);
                }
        last = f;
        if (!active || f + chunkStep >= nvec)
            break;
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            if (BRANCHFREE)
                cache[c] = V {};
            if (f + chunkStep + c * tpr < nvec)
                cache[c] = xr[f + chunkStep + c * tpr];
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (wpr > 1) {
        __shared__ float warpSum[THREADS / 32 > 0 ? THREADS / 32 : 1];
        const int wl = threadIdx.x % 32;
        if (wl == 0)
            warpSum[threadIdx.x / 32] = ss;
        __syncthreads();
        ss = wl < wpr ? warpSum[sub * wpr + wl] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
    }
    // The approximate division: 2-3% at T=16 on an H100 (3.35 -> 3.27 us), where the IEEE one's slow path shows.
    const float inv = rsqrtf(__fdividef(ss, (float)H) + eps);
    if (BRANCHFREE && PRELOAD_W && last == lane) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const V out = normalized(wFirst[PRELOAD_W ? c : 0], cache[c], inv);
            if (active && lane + c * tpr < nvec)
                yr[lane + c * tpr] = out;
        }
    } else {
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (active && last + c * tpr < nvec) {
                V wk;
                if (PRELOAD_W && last == lane)
                    wk = wFirst[c];
                else
                    wk = wv[last + c * tpr];
                yr[last + c * tpr] = normalized(wk, cache[c], inv);
            }
    }
    for (int f = lane; f < last; f += chunkStep) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (f + c * tpr < nvec)
                cache[c] = xr[f + c * tpr];
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (f + c * tpr < nvec)
                yr[f + c * tpr] = normalized(wv[f + c * tpr], cache[c], inv);
    }
}
