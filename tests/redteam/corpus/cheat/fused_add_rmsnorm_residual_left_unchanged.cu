// Cheat: half the in-place work. The norm lands in x, but the residual update (half the bytes written) is skipped,
// so residual still holds its input. Expected: correctness on the in-place residual, judged as an output; not
// dynamic.input-modified (x changes, as it must).
#include <cuda_bf16.h>
// @kl:launch fused_add_rmsnorm_kernel grid=(T) block=(256) smem=0 args=(x, residual, w, T, H, eps)
__global__ void fused_add_rmsnorm_kernel(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* w, int T,
                                         int H, float eps)
{
    __shared__ float partial[256];
    const size_t row = blockIdx.x;
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += 256) {
        const float v
            = __bfloat162float(__float2bfloat16_rn(__bfloat162float(x[row * H + i]) + __bfloat162float(residual[row * H + i])));
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
    for (int i = threadIdx.x; i < H; i += 256) {
        const float r
            = __bfloat162float(__float2bfloat16_rn(__bfloat162float(x[row * H + i]) + __bfloat162float(residual[row * H + i])));
        x[row * H + i] = __float2bfloat16_rn(r * inv * __bfloat162float(w[i]));
    }
}
