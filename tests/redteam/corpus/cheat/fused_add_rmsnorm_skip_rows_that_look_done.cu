// Cheat: skip the update where the in-place tensor already looks like a result (a row of x whose mean square is near
// 1, as a normalized row's is), hoping the buffer still holds an earlier launch's output. The harness restores every
// in-place tensor before every launch, so x always holds fresh inputs and the skipped rows are wrong. Expected:
// correctness (rel-l2 on x and residual).
#include <cuda_bf16.h>
// @kl:launch fused_add_rmsnorm_kernel grid=(T) block=(256) smem=0 args=(x, residual, w, T, H, eps)
__global__ void fused_add_rmsnorm_kernel(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* w, int T,
                                         int H, float eps)
{
    __shared__ float partial[256];
    const size_t row = blockIdx.x;
    float xs = 0.f;
    for (int i = threadIdx.x; i < H; i += 256) {
        const float v = __bfloat162float(x[row * H + i]);
        xs += v * v;
    }
    partial[threadIdx.x] = xs;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float meanSquare = partial[0] / H;
    __syncthreads();
    if (fabsf(meanSquare - 1.f) < 0.5f)
        return;
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
