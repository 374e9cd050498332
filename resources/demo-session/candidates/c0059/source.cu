// Tunable RMSNorm: ROWS rows per block, THREADS/ROWS threads per row, VEC-element vector loads (VEC=8 is
// 16 bytes), and up to CACHE vectors per thread kept in registers so a row is read from memory once.
// Rows longer than THREADS/ROWS*VEC*CACHE stream the rest and read it again (from L2) in the second pass.
#include <cuda_bf16.h>
// @kl:param THREADS = 256 in [64, 128, 256, 512, 1024]
// @kl:param VEC = 8 in [2, 4, 8]
// @kl:param ROWS = 1 in [1, 2, 4, 8]
// @kl:param CACHE = 4 in [1, 2, 4, 8, 16]
// @kl:param MINB = 1 in [1, 2]
// @kl:constraint THREADS / ROWS >= 32
// @kl:constraint VEC * CACHE <= 128
// @kl:launch rmsnorm_template grid=(ceil_div(T, ROWS)) block=(THREADS) smem=0 args=(y, x, w, T, H, eps)

template <int N>
struct alignas(2 * N) BVec {
    __nv_bfloat16 v[N];
};
using V = BVec<VEC>;
constexpr int TPR = THREADS / ROWS; // threads per row
constexpr int WPR = TPR / 32; // warps per row

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    rmsnorm_template(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ x,
                     const __nv_bfloat16* __restrict__ w, int T, int H, float eps)
{
    const int sub = threadIdx.x / TPR;
    const int lane = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * ROWS + sub;
    const bool active = row < T;
    const int nvec = H / VEC;
    const V* xr = reinterpret_cast<const V*>(x + (active ? row : 0) * (long long)H);
    V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * (long long)H);
    const V* wv = reinterpret_cast<const V*>(w);

    V cache[CACHE];
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const int i = lane + c * TPR;
        if (active && i < nvec)
            cache[c] = xr[i];
    }
    float ss = 0.f;
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const int i = lane + c * TPR;
        if (active && i < nvec) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float f = __bfloat162float(cache[c].v[k]);
                ss = fmaf(f, f, ss);
            }
        }
    }
    if (active)
        for (int i = lane + CACHE * TPR; i < nvec; i += TPR) {
            const V v = xr[i];
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float f = __bfloat162float(v.v[k]);
                ss = fmaf(f, f, ss);
            }
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (WPR > 1) {
        __shared__ float red[ROWS][WPR > 1 ? WPR : 1];
        if ((lane & 31) == 0)
            red[sub][lane / 32] = ss;
        __syncthreads();
        ss = 0.f;
#pragma unroll
        for (int k = 0; k < WPR; ++k)
            ss += red[sub][k];
    }
    const float inv = rsqrtf(ss / (float)H + eps);
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const int i = lane + c * TPR;
        if (active && i < nvec) {
            const V wk = wv[i];
            V out;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                out.v[k] = __float2bfloat16_rn(__bfloat162float(cache[c].v[k]) * inv * __bfloat162float(wk.v[k]));
            yr[i] = out;
        }
    }
    if (active)
        for (int i = lane + CACHE * TPR; i < nvec; i += TPR) {
            const V v = xr[i];
            const V wk = wv[i];
            V out;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                out.v[k] = __float2bfloat16_rn(__bfloat162float(v.v[k]) * inv * __bfloat162float(wk.v[k]));
            yr[i] = out;
        }
}
