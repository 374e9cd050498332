// Honest: split-K into a declared fp32 workspace (init=poison: every partial is written before it is read), and a
// reduction launched with programmatic dependent launch (pdl=1). The partial kernel lets the reduction be scheduled
// early (griddepcontrol.launch_dependents); the reduction's first instruction is griddepcontrol.wait, so it reads
// the partials only once the partial kernel has finished and flushed them.
#include <cuda_bf16.h>
// @kl:param SPLIT = 4 in [2, 4, 8]
// @kl:constraint ARCH >= 90
// @kl:workspace part bytes=(SPLIT * M * N * 4) init=poison
// @kl:launch gemm_partial grid=(ceil_div(N, 32), ceil_div(M, 32), SPLIT) block=(32, 8) smem=0 args=(part, A, B, M, N, K)
// @kl:launch splitk_reduce grid=(ceil_div(M * N, 1024)) block=(256) pdl=1 args=(C, part, M, N)

// Slice blockIdx.z of K for a 32x32 tile, fp32 products in shared-memory tiles; every element of the slice's
// partial is written (zero for an empty slice), so the reduction reads nothing stale.
extern "C" __global__ void gemm_partial(
    float* __restrict__ part, const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, int M, int N, int K)
{
    // The reduction may be scheduled now: it waits for this grid with griddepcontrol.wait before reading.
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    __shared__ float As[32][33];
    __shared__ float Bs[32][33];
    const int m0 = blockIdx.y * 32, n0 = blockIdx.x * 32, tx = threadIdx.x, ty = threadIdx.y;
    const int slice = (K + SPLIT - 1) / SPLIT;
    const int kBegin = blockIdx.z * slice, kEnd = min(K, kBegin + slice);
    float sum[4] = { 0.f, 0.f, 0.f, 0.f };
    for (int k0 = kBegin; k0 < kEnd; k0 += 32) {
        for (int r = ty; r < 32; r += 8) {
            const int k = k0 + tx;
            As[r][tx] = m0 + r < M && k < kEnd ? __bfloat162float(A[(long long)(m0 + r) * K + k]) : 0.f;
            Bs[r][tx] = n0 + r < N && k < kEnd ? __bfloat162float(B[(long long)(n0 + r) * K + k]) : 0.f;
        }
        __syncthreads();
        for (int kk = 0; kk < 32; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                sum[i] += As[ty + 8 * i][kk] * Bs[tx][kk];
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = m0 + ty + 8 * i, n = n0 + tx;
        if (m < M && n < N)
            part[((long long)blockIdx.z * M + m) * N + n] = sum[i];
    }
}

// Four outputs a thread: the SPLIT partials summed in fp32, rounded to bf16 once.
extern "C" __global__ void __launch_bounds__(256) splitk_reduce(
    __nv_bfloat16* __restrict__ C, const float* __restrict__ part, int M, int N)
{
    const long long count = (long long)M * N;
    const long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 4;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (i >= count)
        return;
    float4 sum = *reinterpret_cast<const float4*>(part + i);
    for (int s = 1; s < SPLIT; ++s) {
        const float4 v = *reinterpret_cast<const float4*>(part + s * count + i);
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
    }
    *reinterpret_cast<__nv_bfloat162*>(C + i) = __floats2bfloat162_rn(sum.x, sum.y);
    *reinterpret_cast<__nv_bfloat162*>(C + i + 2) = __floats2bfloat162_rn(sum.z, sum.w);
}
