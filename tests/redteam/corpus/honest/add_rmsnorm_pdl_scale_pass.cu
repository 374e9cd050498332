// Honest: two launches with programmatic dependent launch. The first writes residual_out = x + residual (bf16) and
// each row's 1/rms into a declared workspace; the second (pdl=1) starts early, stages the weight (an input, which
// no kernel of the plan writes) in shared memory while the first drains, and only then executes
// griddepcontrol.wait before it reads residual_out and the workspace. Reading inputs before the wait is the point
// of the overlap and must pass the PTX rules.
#include <cuda_bf16.h>
// @kl:constraint ARCH >= 90
// @kl:workspace inv bytes=(T * 4) init=poison
// @kl:launch add_rms_sum grid=(T) block=(256) smem=0 args=(residual_out, inv, x, residual, H, eps)
// @kl:launch add_rms_scale grid=(T) block=(256) smem=(H * 4) pdl=1 args=(y, residual_out, inv, w, H)

extern "C" __global__ void add_rms_sum(__nv_bfloat16* residual_out, float* inv, const __nv_bfloat16* x,
    const __nv_bfloat16* residual, int H, float eps)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    __shared__ float partial[256];
    const long long row = blockIdx.x;
    float ss = 0.f;
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
    if (threadIdx.x == 0)
        inv[row] = rsqrtf(partial[0] / H + eps);
}

extern "C" __global__ void add_rms_scale(
    __nv_bfloat16* y, const __nv_bfloat16* residual_out, const float* inv, const __nv_bfloat16* w, int H)
{
    extern __shared__ float weight[];
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        weight[i] = __bfloat162float(w[i]);
    __syncthreads();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const long long row = blockIdx.x;
    const float scale = inv[row];
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        y[row * H + i] = __float2bfloat16(__bfloat162float(residual_out[row * H + i]) * scale * weight[i]);
}
