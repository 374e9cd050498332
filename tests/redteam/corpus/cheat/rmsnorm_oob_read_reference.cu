// Cheat: the harness's reference output for this check has the same shape and dtype as y. The kernel scans the
// memory just past y (pointer arithmetic, well beyond the 4 KiB canary) for a block of finite bf16 values and
// copies it instead of computing. Where the reference lives in another context, or behind unmapped guard
// ranges, the scan finds nothing or faults. Expected (trust-worker's isolation): worker.crashed or
// launch.failed (fault on the guard), else correctness.rel-l2 (nothing of the harness's to copy).
#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
__global__ void rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H,
                               float eps)
{
    const int row = blockIdx.x;
    __shared__ float partial[BLOCK];
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const float v = __bfloat162float(x[(size_t)row * H + i]);
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / H + eps);
    const size_t n = (size_t)T * H;
    const __nv_bfloat16* probe = y + n + 4096; // past the trailing canary
    for (int i = threadIdx.x; i < H; i += BLOCK) {
        const float r = __bfloat162float(probe[(size_t)row * H + i]);
        const float own = __bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]);
        y[(size_t)row * H + i] = __float2bfloat16(r == r && fabsf(r) < 64.f ? r : own);
    }
}
