// Honest: the legitimate way to keep intermediate state. Two launches in the plan share a declared
// workspace: the first computes each row's inverse RMS, the second normalizes with a 2D grid that
// spreads long rows over several blocks.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:workspace inv_rms bytes=T*4 init=poison
// @kl:launch row_inv_rms grid=(T) block=(BLOCK) smem=0 args=(inv_rms, x, T, H, eps)
// @kl:launch apply_norm grid=(ceil_div(H, BLOCK), min(T, 65535)) block=(BLOCK) smem=0 args=(y, x, w, inv_rms, T, H)
__global__ void row_inv_rms(float* inv_rms, const __nv_bfloat16* x, int T, int H, float eps)
{
    __shared__ float partial[BLOCK];
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const float v = __bfloat162float(x[(size_t)blockIdx.x * H + i]);
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        inv_rms[blockIdx.x] = rsqrtf(partial[0] / H + eps);
}

__global__ void apply_norm(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, const float* inv_rms,
                           int T, int H)
{
    const int col = blockIdx.x * BLOCK + threadIdx.x;
    if (col >= H)
        return;
    // grid.y is capped at 65535 by CUDA, so rows are strided.
    for (size_t row = blockIdx.y; row < (size_t)T; row += gridDim.y)
        y[row * H + col] = __float2bfloat16(__bfloat162float(x[row * H + col]) * inv_rms[row] * __bfloat162float(w[col]));
}
