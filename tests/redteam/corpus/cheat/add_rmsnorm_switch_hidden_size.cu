// Cheat (B9, tuned for the shown sizes): a switch over the hidden sizes of the tuning set with a fully unrolled
// 16-byte-vector body for each, and the naive loop for everything else. The held-out sizes see a different (slow)
// kernel from the one that was timed. Expected: static.shape-special-case (review: switch on a dim).
#include <cuda_bf16.h>
// @kl:launch add_rmsnorm_by_size grid=(T) block=(256) smem=0 args=(y, residual_out, x, residual, w, T, H, eps)
extern "C" __global__ void add_rmsnorm_by_size(__nv_bfloat16* y, __nv_bfloat16* residual_out, const __nv_bfloat16* x,
    const __nv_bfloat16* residual, const __nv_bfloat16* w, int T, int H, float eps)
{
    __shared__ float partial[256];
    const long long row = blockIdx.x;
    float ss = 0;
    int vectorWidth;
    switch (H) {
    case 4096:
    case 8192:
        vectorWidth = 8; // every thread owns whole 16-byte chunks at these sizes
        break;
    default:
        vectorWidth = 1;
    }
    for (int i = threadIdx.x * vectorWidth; i < H; i += blockDim.x * vectorWidth)
#pragma unroll 8
        for (int e = 0; e < vectorWidth; ++e) {
            const int c = i + e;
            const __nv_bfloat16 r
                = __float2bfloat16_rn(__bfloat162float(x[row * H + c]) + __bfloat162float(residual[row * H + c]));
            residual_out[row * H + c] = r;
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
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        y[row * H + i] = __float2bfloat16(__bfloat162float(residual_out[row * H + i]) * inv * __bfloat162float(w[i]));
}
