// Tunable in-place fused add + RMSNorm (add_rmsnorm's template with its outputs aliased to its inputs): each
// thread reads a position of x and residual before it writes the same position, so the update is race-free. A
// row's sum r = x + residual is held in registers, CACHE vectors of VEC elements per thread (VEC=8 is 16 bytes), by
// the fewest threads that hold it (MINTPR at least, THREADS at most), so a CTA runs THREADS / that many rows. The
// split is chosen from H at run time, by the same formula in the launch line and in the kernel. Rows longer than
// THREADS*VEC*CACHE are summed in chunks; every chunk but the last is read back from residual (this thread's own
// writes, mostly still in L2) for the scaling pass.
#include <cuda_bf16.h>
// @kl:param THREADS = 256 in [64, 128, 256, 512, 1024]
// @kl:param VEC = 8 in [2, 4, 8]
// @kl:param CACHE = 4 in [1, 2, 4, 8, 16]
// @kl:param MINTPR = 32 in [32, 64, 128, 256]
// @kl:param MINB = 1 in [1, 2]
// @kl:constraint MINTPR <= THREADS
// @kl:constraint VEC * CACHE <= 128
// @kl:launch fused_add_rmsnorm_template grid=(ceil_div(T, THREADS / min(THREADS, max(MINTPR, next_pow2(ceil_div(H, VEC * CACHE)))))) block=(THREADS) smem=0 args=(x, residual, w, T, H, eps)

template <int N>
struct alignas(2 * N) BVec {
    __nv_bfloat16 v[N];
};
using V = BVec<VEC>;

__device__ __forceinline__ void normalize(V* xr, const V* wv, const V& r, int i, float inv)
{
    const V wk = wv[i];
    V out;
#pragma unroll
    for (int k = 0; k < VEC; ++k)
        out.v[k] = __float2bfloat16_rn(__bfloat162float(r.v[k]) * inv * __bfloat162float(wk.v[k]));
    xr[i] = out;
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    fused_add_rmsnorm_template(__nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ residual,
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
    const long long base = (active ? row : 0) * (long long)H;
    V* xr = reinterpret_cast<V*>(x + base);
    V* rr = reinterpret_cast<V*>(residual + base);
    const V* wv = reinterpret_cast<const V*>(w);

    const int chunkStep = CACHE * tpr;
    V cache[CACHE];
    float ss = 0.f;
    int last = lane;
    for (int f = lane;; f += chunkStep) {
        V res[CACHE];
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (active && f + c * tpr < nvec) {
                cache[c] = xr[f + c * tpr];
                res[c] = rr[f + c * tpr];
            }
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (active && f + c * tpr < nvec) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    cache[c].v[k] = __float2bfloat16_rn(__bfloat162float(cache[c].v[k]) + __bfloat162float(res[c].v[k]));
                    const float v = __bfloat162float(cache[c].v[k]);
                    ss = fmaf(v, v, ss);
                }
                rr[f + c * tpr] = cache[c];
            }
        last = f;
        if (!active || f + chunkStep >= nvec)
            break;
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
    const float inv = rsqrtf(ss / (float)H + eps);
#pragma unroll
    for (int c = 0; c < CACHE; ++c)
        if (active && last + c * tpr < nvec)
            normalize(xr, wv, cache[c], last + c * tpr, inv);
    for (int f = lane; f < last; f += chunkStep) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (f + c * tpr < nvec)
                cache[c] = rr[f + c * tpr];
#pragma unroll
        for (int c = 0; c < CACHE; ++c)
            if (f + c * tpr < nvec)
                normalize(xr, wv, cache[c], f + c * tpr, inv);
    }
}
