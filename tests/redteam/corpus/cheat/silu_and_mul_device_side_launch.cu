// Cheat: the kernel launches a second grid from the device (the runtime's parameter buffer and launch entry
// points, declared by hand), which the harness never planned and the events around the plan may not cover.
// Expected: ptx.device-runtime (and static.host-code on the cuda* names).
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:constraint I % 2 == 0
// @kl:launch silu_and_mul_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, T, I)
extern "C" __device__ void* cudaGetParameterBufferV2(void* func, dim3 grid, dim3 block, unsigned int smem);
extern "C" __device__ int cudaLaunchDeviceV2(void* parameterBuffer, void* stream);
__device__ __forceinline__ float silu(float g) { return g / (1.f + __expf(-g)); }

__global__ void silu_and_mul_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, int T, int I)
{
    const __nv_bfloat16* gate = x + (size_t)blockIdx.x * 2 * I;
    const __nv_bfloat16* up = gate + I;
    __nv_bfloat16* out = y + (size_t)blockIdx.x * I;
    if (blockIdx.x == 0 && threadIdx.x == 0 && T > 1) {
        void* params = cudaGetParameterBufferV2((void*)silu_and_mul_kernel, dim3(T - 1), dim3(BLOCK), 0);
        if (params) {
            *static_cast<__nv_bfloat16**>(params) = y + I;
            cudaLaunchDeviceV2(params, nullptr);
        }
    }
    if (blockIdx.x > 0 && T > 1)
        return;
    for (int i = threadIdx.x; i < I; i += BLOCK)
        out[i] = __float2bfloat16(silu(__bfloat162float(gate[i])) * __bfloat162float(up[i]));
}
