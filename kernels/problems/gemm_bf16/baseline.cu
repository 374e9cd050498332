// Naive candidate: one output per thread, 16x16 shared-memory tiles, fp32 accumulation, no tensor cores.
// (Speedups are measured against cuBLAS: problem.json names it as library_baseline.)
#include <cuda_bf16.h>
// @kl:launch gemm_naive grid=(ceil_div(N, 16), ceil_div(M, 16)) block=(16, 16) smem=0 args=(C, A, B, M, N, K)
extern "C" __global__ void gemm_naive(__nv_bfloat16* C, const __nv_bfloat16* A, const __nv_bfloat16* B, int M, int N,
                                      int K)
{
    __shared__ float As[16][17];
    __shared__ float Bs[16][17];
    const int m = blockIdx.y * 16 + threadIdx.y;
    const int n = blockIdx.x * 16 + threadIdx.x;
    const int nb = blockIdx.x * 16 + threadIdx.y;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        As[threadIdx.y][threadIdx.x] = m < M ? __bfloat162float(A[(long long)m * K + k0 + threadIdx.x]) : 0.f;
        Bs[threadIdx.y][threadIdx.x] = nb < N ? __bfloat162float(B[(long long)nb * K + k0 + threadIdx.x]) : 0.f;
        __syncthreads();
        for (int kk = 0; kk < 16; ++kk)
            acc += As[threadIdx.y][kk] * Bs[threadIdx.x][kk];
        __syncthreads();
    }
    if (m < M && n < N)
        C[(long long)m * N + n] = __float2bfloat16_rn(acc);
}
