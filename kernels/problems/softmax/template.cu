// Tunable softmax: ROWS rows per block, THREADS/ROWS threads per row, VEC-element vector loads (VEC=8 is
// 16 bytes), up to CACHE vectors per thread held in registers so a row that fits is read once and written
// once. Longer rows merge an online (max, sum) over the rest and read it once more to write.
#include <cuda_fp16.h>
// @kl:param THREADS = 512 in [64, 128, 256, 512, 1024]
// @kl:param VEC = 8 in [2, 4, 8]
// @kl:param ROWS = 1 in [1, 2, 4, 8]
// @kl:param CACHE = 8 in [1, 2, 4, 8, 16]
// @kl:param MINB = 1 in [1, 2]
// @kl:constraint THREADS / ROWS >= 32
// @kl:constraint VEC * CACHE <= 128
// @kl:launch softmax_template grid=(ceil_div(R, ROWS)) block=(THREADS) smem=0 args=(y, x, R, C)

template <int N>
struct alignas(2 * N) HVec {
    __half v[N];
};
using V = HVec<VEC>;
constexpr int TPR = THREADS / ROWS;
constexpr int WPR = TPR / 32;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2)
{
    const float mm = fmaxf(m, m2);
    if (mm == -__int_as_float(0x7f800000))
        return;
    s = s * exp2f((m - mm) * kLog2e) + s2 * exp2f((m2 - mm) * kLog2e);
    m = mm;
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    softmax_template(__half* __restrict__ y, const __half* __restrict__ x, int R, int C)
{
    const int sub = threadIdx.x / TPR;
    const int lane = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * ROWS + sub;
    const bool active = row < R;
    const int nvec = C / VEC;
    const V* xr = reinterpret_cast<const V*>(x + (active ? row : 0) * (long long)C);
    V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * (long long)C);

    V cache[CACHE];
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const int i = lane + c * TPR;
        if (active && i < nvec)
            cache[c] = xr[i];
    }
    float m = -__int_as_float(0x7f800000);
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const int i = lane + c * TPR;
        if (active && i < nvec)
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                m = fmaxf(m, __half2float(cache[c].v[k]));
    }
    float s = 0.f;
    if (m != -__int_as_float(0x7f800000)) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const int i = lane + c * TPR;
            if (active && i < nvec)
#pragma unroll
                for (int k = 0; k < VEC; ++k)
                    s += exp2f((__half2float(cache[c].v[k]) - m) * kLog2e);
        }
    }
    if (active)
        for (int i = lane + CACHE * TPR; i < nvec; i += TPR) {
            const V v = xr[i];
            float m2 = -__int_as_float(0x7f800000);
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                m2 = fmaxf(m2, __half2float(v.v[k]));
            float s2 = 0.f;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                s2 += exp2f((__half2float(v.v[k]) - m2) * kLog2e);
            merge(m, s, m2, s2);
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
    if (WPR > 1) {
        __shared__ float redM[ROWS][WPR > 1 ? WPR : 1];
        __shared__ float redS[ROWS][WPR > 1 ? WPR : 1];
        if ((lane & 31) == 0) {
            redM[sub][lane / 32] = m;
            redS[sub][lane / 32] = s;
        }
        __syncthreads();
        m = -__int_as_float(0x7f800000);
        s = 0.f;
#pragma unroll
        for (int k = 0; k < WPR; ++k)
            merge(m, s, redM[sub][k], redS[sub][k]);
    }
    const float inv = 1.f / s;
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const int i = lane + c * TPR;
        if (active && i < nvec) {
            V out;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                out.v[k] = __float2half_rn(exp2f((__half2float(cache[c].v[k]) - m) * kLog2e) * inv);
            yr[i] = out;
        }
    }
    if (active)
        for (int i = lane + CACHE * TPR; i < nvec; i += TPR) {
            const V v = xr[i];
            V out;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                out.v[k] = __float2half_rn(exp2f((__half2float(v.v[k]) - m) * kLog2e) * inv);
            yr[i] = out;
        }
}
