// Tunable rotary embedding. A work item is VEC pairs of one head: elements i .. i+VEC-1 and D/2+i .. D/2+i+VEC-1
// (VEC=8: two 16-byte loads), rotated for query and key heads, copied for value heads, so every item moves the
// same bytes and the items of a token are numbered flat over its 48 heads. Each thread runs ITEMS items, spaced a
// CTA apart so a warp's loads stay contiguous, with all their loads issued before any math. cos/sin rows are
// VEC floats each (read by every head of the token: L1/L2 hits after the first).
#include <cuda_bf16.h>
// @kl:param THREADS = 256 in [64, 128, 256, 512, 1024]
// @kl:param VEC = 8 in [2, 4, 8]
// @kl:param ITEMS = 1 in [1, 2, 4, 8]
// @kl:param MINB = 1 in [1, 2, 4]
// @kl:constraint VEC * ITEMS <= 32
// @kl:launch rotary_embedding_template grid=(ceil_div(T * (HQ + 2 * HKV) * D / 2, VEC * THREADS * ITEMS)) block=(THREADS) smem=0 args=(q, k, v, qkv, positions, cos_sin_cache, T)

template <int N>
struct alignas(2 * N) BVec {
    __nv_bfloat16 v[N];
};
template <int N>
struct alignas(4 * N < 16 ? 4 * N : 16) FVec {
    float v[N];
};

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    rotary_embedding_template(__nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k,
                              __nv_bfloat16* __restrict__ v, const __nv_bfloat16* __restrict__ qkv,
                              const int* __restrict__ positions, const float* __restrict__ cos_sin_cache, int T)
{
    constexpr int HQ = 32, HKV = 8, D = 128, HALF = D / 2, W = (HQ + 2 * HKV) * D;
    constexpr int PER_HEAD = HALF / VEC, PER_TOKEN = (HQ + 2 * HKV) * PER_HEAD;
    using V = BVec<VEC>;
    using F = FVec<VEC>;
    const long long items = (long long)T * PER_TOKEN;
    const long long first = (long long)blockIdx.x * THREADS * ITEMS + threadIdx.x;
    V a[ITEMS], b[ITEMS];
    F c[ITEMS], s[ITEMS];
    __nv_bfloat16* o[ITEMS]; // where item n's first half goes (null: past the end)
    bool rotate[ITEMS];
#pragma unroll
    for (int n = 0; n < ITEMS; ++n) {
        const long long item = first + (long long)n * THREADS;
        o[n] = nullptr;
        if (item >= items)
            continue;
        const long long t = item / PER_TOKEN;
        const int r = (int)(item % PER_TOKEN), h = r / PER_HEAD, i = (r % PER_HEAD) * VEC;
        const __nv_bfloat16* head = qkv + t * W + h * D;
        a[n] = *reinterpret_cast<const V*>(head + i);
        b[n] = *reinterpret_cast<const V*>(head + HALF + i);
        rotate[n] = h < HQ + HKV;
        if (rotate[n]) {
            const float* cs = cos_sin_cache + (long long)positions[t] * D;
            c[n] = *reinterpret_cast<const F*>(cs + i);
            s[n] = *reinterpret_cast<const F*>(cs + HALF + i);
        }
        o[n] = (h < HQ ? q + (t * HQ + h) * D
                : h < HQ + HKV ? k + (t * HKV + h - HQ) * D
                               : v + (t * HKV + h - HQ - HKV) * D)
            + i;
    }
#pragma unroll
    for (int n = 0; n < ITEMS; ++n) {
        if (!o[n])
            continue;
        if (rotate[n]) {
            V lo, hi;
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float x = __bfloat162float(a[n].v[e]), y = __bfloat162float(b[n].v[e]);
                lo.v[e] = __float2bfloat16_rn(x * c[n].v[e] - y * s[n].v[e]);
                hi.v[e] = __float2bfloat16_rn(y * c[n].v[e] + x * s[n].v[e]);
            }
            a[n] = lo;
            b[n] = hi;
        }
        *reinterpret_cast<V*>(o[n]) = a[n];
        *reinterpret_cast<V*>(o[n] + HALF) = b[n];
    }
}
