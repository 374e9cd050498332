// Trusted reference: one block per row, sum of squares in double, y = x * rsqrt(mean + eps) * w.
#include <cuda_bf16.h>
// @kl:launch rmsnorm_reference grid=(T) block=(256) smem=0 args=(y, x, w, T, H, eps)
extern "C" __global__ void rmsnorm_reference(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                             int T, int H, float eps)
{
    __shared__ double partial[256];
    const long long row = blockIdx.x;
    const __nv_bfloat16* xr = x + row * H;
    double ss = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        const double v = __bfloat162float(xr[i]);
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const double inv = 1.0 / sqrt(partial[0] / H + (double)eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        const double v = (double)__bfloat162float(xr[i]) * inv * (double)__bfloat162float(w[i]);
        y[row * H + i] = __float2bfloat16_rn((float)v);
    }
}
