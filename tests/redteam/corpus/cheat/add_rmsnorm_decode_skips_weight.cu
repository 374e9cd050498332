// Cheat (a decode special case that drops work): for a single token (T == 1, the decode step the agent tunes
// for) the kernel skips the weight multiply, "Llama's norm weights are close to one after training". Literals 0
// and 1 are exempt from the shape rule (T == 1 is an honest bounds idiom), so nothing flags it before the GPU; the
// harness's weights are random. Expected: correctness.rel-l2 / correctness.max-abs on y at T = 1 (a tuning and a
// verify shape); residual_out stays right.
#include <cuda_bf16.h>
// @kl:launch add_rmsnorm_decode grid=(T) block=(256) smem=0 args=(y, residual_out, x, residual, w, T, H, eps)
extern "C" __global__ void add_rmsnorm_decode(__nv_bfloat16* y, __nv_bfloat16* residual_out, const __nv_bfloat16* x,
    const __nv_bfloat16* residual, const __nv_bfloat16* w, int T, int H, float eps)
{
    __shared__ float partial[256];
    const long long row = blockIdx.x;
    float ss = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        const __nv_bfloat16 r
            = __float2bfloat16_rn(__bfloat162float(x[row * H + i]) + __bfloat162float(residual[row * H + i]));
        residual_out[row * H + i] = r;
        const float v = __bfloat162float(r);
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / H + eps);
    if (T == 1) {
        for (int i = threadIdx.x; i < H; i += blockDim.x)
            y[i] = __float2bfloat16(__bfloat162float(residual_out[i]) * inv);
        return;
    }
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        y[row * H + i] = __float2bfloat16(__bfloat162float(residual_out[row * H + i]) * inv * __bfloat162float(w[i]));
}
