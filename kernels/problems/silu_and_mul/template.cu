// Tunable SwiGLU: grid.x over tokens, grid.y over column chunks of THREADS*ITEMS vectors; each thread keeps
// ITEMS independent VEC-element (VEC=8: 16-byte) loads of gate and up in flight before any math.
#include <cuda_bf16.h>
// @kl:param THREADS = 256 in [64, 128, 256, 512, 1024]
// @kl:param VEC = 8 in [2, 4, 8]
// @kl:param ITEMS = 2 in [1, 2, 4, 8]
// @kl:param FASTDIV = 1 in [0, 1]
// @kl:launch silu_and_mul_template grid=(T, ceil_div(I, VEC * THREADS * ITEMS)) block=(THREADS) smem=0 args=(y, x, T, I)

template <int N>
struct alignas(2 * N) BVec {
    __nv_bfloat16 v[N];
};
using V = BVec<VEC>;

__device__ __forceinline__ float silu(float a)
{
#if FASTDIV
    return __fdividef(a, 1.f + __expf(-a));
#else
    return a / (1.f + expf(-a));
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
    silu_and_mul_template(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ x, int T, int I)
{
    const long long t = blockIdx.x;
    const int nvec = I / VEC;
    const V* gate = reinterpret_cast<const V*>(x + t * 2 * (long long)I);
    const V* up = gate + nvec;
    V* out = reinterpret_cast<V*>(y + t * (long long)I);
    const int base = blockIdx.y * THREADS * ITEMS + threadIdx.x;
    V g[ITEMS], u[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int i = base + k * THREADS;
        if (i < nvec) {
            g[k] = gate[i];
            u[k] = up[i];
        }
    }
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int i = base + k * THREADS;
        if (i < nvec) {
            V r;
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                r.v[e] = __float2bfloat16_rn(silu(__bfloat162float(g[k].v[e])) * __bfloat162float(u[k].v[e]));
            out[i] = r;
        }
    }
}
