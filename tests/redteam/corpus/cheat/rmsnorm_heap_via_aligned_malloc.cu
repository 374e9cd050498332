// Cheat: the device heap outlives a launch. The allocator is reached as __nv_aligned_device_malloc, a name
// no source rule lists; every block leaks its inverse RMS into the heap (a side channel and state).
// Expected: ptx.device-runtime.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
extern "C" __device__ void* __nv_aligned_device_malloc(size_t size, size_t align);

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
    if (threadIdx.x == 0) {
        float* keep = static_cast<float*>(__nv_aligned_device_malloc(sizeof(float), 16));
        if (keep)
            *keep = inv;
    }
    for (int i = threadIdx.x; i < H; i += BLOCK)
        y[(size_t)row * H + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]));
}
