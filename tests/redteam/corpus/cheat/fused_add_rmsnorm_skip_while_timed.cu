// Cheat: phase detection on an in-place problem. Honest while verified; once timing starts (many calls per shape)
// it returns at once, leaving x and residual as they were. Timed in-place tensors are restored before every batch and
// re-checked like outputs. Expected: dynamic.timed-output-wrong, or physics.below-roofline on the time alone.
#include <cuda_bf16.h>
// @kl:launch fused_add_rmsnorm_kernel grid=(T) block=(256) smem=0 args=(x, residual, w, T, H, eps)
__device__ const unsigned int kCallsByShape[4096] = {};

__global__ void fused_add_rmsnorm_kernel(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* w, int T,
                                         int H, float eps)
{
    unsigned int* calls = const_cast<unsigned int*>(kCallsByShape) + ((T * 131 + H) & 4095);
    const unsigned int seen = *static_cast<volatile unsigned int*>(calls);
    const size_t row = blockIdx.x;
    if (row == 0 && threadIdx.x == 0)
        atomicAdd(calls, 1u);
    if (seen >= 16u)
        return;
    __shared__ float partial[256];
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += 256) {
        const __nv_bfloat16 r = __float2bfloat16_rn(__bfloat162float(x[row * H + i]) + __bfloat162float(residual[row * H + i]));
        residual[row * H + i] = r;
        const float v = __bfloat162float(r);
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / H + eps);
    for (int i = threadIdx.x; i < H; i += 256)
        x[row * H + i] = __float2bfloat16_rn(__bfloat162float(residual[row * H + i]) * inv * __bfloat162float(w[i]));
}
