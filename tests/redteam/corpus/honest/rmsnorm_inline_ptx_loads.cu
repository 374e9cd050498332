// Honest: inline PTX for streaming loads that bypass L1 (ld.global.nc.L1::no_allocate) and the
// approximate reciprocal square root (rsqrt.approx.f32, about 2 ulp): PTX that neither reads a timer nor
// ends the grid.
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:constraint H % 2 == 0
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
__device__ __forceinline__ unsigned int loadStreaming(const void* p)
{
    unsigned int v;
    asm volatile("ld.global.nc.L1::no_allocate.b32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ float rsqrtApprox(float v)
{
    float r;
    asm("rsqrt.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    const int pairs = H / 2;
    const __nv_bfloat162* xr = reinterpret_cast<const __nv_bfloat162*>(x + (size_t)blockIdx.x * H);
    const __nv_bfloat162* wr = reinterpret_cast<const __nv_bfloat162*>(w);
    __nv_bfloat162* yr = reinterpret_cast<__nv_bfloat162*>(y + (size_t)blockIdx.x * H);
    float ss = 0.f;
    for (int i = threadIdx.x; i < pairs; i += BLOCK) {
        const unsigned int raw = loadStreaming(xr + i);
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw));
        ss += f.x * f.x + f.y * f.y;
    }
    __shared__ float partial[BLOCK];
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtApprox(partial[0] / H + eps);
    for (int i = threadIdx.x; i < pairs; i += BLOCK) {
        const float2 a = __bfloat1622float2(xr[i]);
        const float2 b = __bfloat1622float2(wr[i]);
        yr[i] = __floats2bfloat162_rn(a.x * inv * b.x, a.y * inv * b.y);
    }
}
