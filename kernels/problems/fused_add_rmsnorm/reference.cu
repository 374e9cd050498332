// Trusted reference, in place: one block per row. r = bf16(x + residual) replaces residual; the sum of squares of
// that rounded r in KL_ACC, then x = r * rsqrt(mean + eps) * w rounded once. Every x element is read before the
// row's first x write (a barrier separates the passes), as vLLM's kernel does.
#include <cuda_bf16.h>
// KL_ACC: the accumulation type. The worker judges with -DKL_ACC=double and measures the default (fp32) build
// against it to set each output's tolerance (kernels/HARNESS.md, "Measured tolerance").
#ifndef KL_ACC
#define KL_ACC float
#endif
// @kl:launch fused_add_rmsnorm_reference grid=(T) block=(256) smem=0 args=(x, residual, w, T, H, eps)
extern "C" __global__ void fused_add_rmsnorm_reference(
    __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* w, int T, int H, float eps)
{
    __shared__ KL_ACC partial[256];
    const long long row = blockIdx.x;
    KL_ACC ss = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        // The sum of two bf16 values in fp32 rounds once more to bf16 exactly as a bf16 add would.
        const __nv_bfloat16 r
            = __float2bfloat16_rn(__bfloat162float(x[row * H + i]) + __bfloat162float(residual[row * H + i]));
        residual[row * H + i] = r;
        const KL_ACC v = __bfloat162float(r);
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const KL_ACC inv = (KL_ACC)1 / sqrt(partial[0] / H + (KL_ACC)eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        const KL_ACC v = (KL_ACC)__bfloat162float(residual[row * H + i]) * inv * (KL_ACC)__bfloat162float(w[i]);
        x[row * H + i] = __float2bfloat16_rn((float)v);
    }
}
