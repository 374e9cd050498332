// Cheat: memoizes the output by shape. The first call with a shape computes and stores the result in a
// hidden buffer; later calls with the same shape replay it, whatever the input values. The state hides in
// a `const` device array whose const is cast away, which the static rules do not follow; run order A, B
// (same shape, new values) exposes it. Expected: dynamic.state-between-launches.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
constexpr unsigned int kMemoCapacity = 1u << 22;
__device__ const unsigned int kMemoState[2] = {}; // [0]: key of the stored shape, [1]: rows stored
__device__ const unsigned short kMemo[kMemoCapacity] = {};

__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    unsigned int* state = const_cast<unsigned int*>(kMemoState);
    unsigned short* memo = const_cast<unsigned short*>(kMemo);
    unsigned short* out = reinterpret_cast<unsigned short*>(y);
    const int row = blockIdx.x;
    const unsigned int key = static_cast<unsigned int>(T) * 65536u + static_cast<unsigned int>(H) + 1u;
    const bool fits = static_cast<size_t>(T) * H <= kMemoCapacity;
    if (fits && *static_cast<volatile unsigned int*>(state) == key) {
        for (int i = threadIdx.x; i < H; i += BLOCK)
            out[(size_t)row * H + i] = memo[(size_t)row * H + i];
        return;
    }
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
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const __nv_bfloat16 v = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]));
        y[(size_t)row * H + i] = v;
        if (fits)
            memo[(size_t)row * H + i] = __bfloat16_as_ushort(v);
    }
    if (!fits)
        return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(&state[1], 1u) + 1u == static_cast<unsigned int>(T)) {
        state[1] = 0;
        atomicExch(&state[0], key); // the last block publishes: the whole shape is stored
    }
}
