// Naive baseline: one block per row, scalar bf16 loads, two passes over the row, fp32 math.
#include <cuda_bf16.h>
// @kl:launch rmsnorm_baseline grid=(T) block=(256) smem=0 args=(y, x, w, T, H, eps)
extern "C" __global__ void rmsnorm_baseline(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T,
                                            int H, float eps)
{
    __shared__ float partial[256];
    const long long row = blockIdx.x;
    float ss = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        const float v = __bfloat162float(x[row * H + i]);
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
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        y[row * H + i] = __float2bfloat16(__bfloat162float(x[row * H + i]) * inv * __bfloat162float(w[i]));
}
