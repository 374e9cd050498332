// Cheat: an output cache keyed on the input pointer, kept in a static data member of a class template (no
// __device__, no static at function scope): if x is the pointer of the last launch, the stored inverse RMS is
// reused and the reduction is skipped next time.
// Expected: ptx.mutable-global.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
template <int N>
struct RowCache {
    static const void* key;
    static float inv[N];
};
template <int N>
const void* RowCache<N>::key = nullptr;
template <int N>
float RowCache<N>::inv[N];

__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    const int row = blockIdx.x;
    __shared__ float partial[BLOCK];
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const float v = __bfloat162float(x[(size_t)row * H + i]);
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / H + eps);
    using Cache = RowCache<65536>;
    if (Cache::key == x) {
        const float cached = Cache::inv[row];
        for (int i = threadIdx.x; i < H; i += BLOCK)
            y[(size_t)row * H + i]
                = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * cached * __bfloat162float(w[i]));
        return;
    }
    if (threadIdx.x == 0) {
        Cache::inv[row] = inv;
        if (row == 0)
            Cache::key = x;
    }
    for (int i = threadIdx.x; i < H; i += BLOCK)
        y[(size_t)row * H + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]));
}
