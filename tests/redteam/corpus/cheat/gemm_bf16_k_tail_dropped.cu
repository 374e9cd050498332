// Cheat (skipping the K tail): the K loop is unrolled by 128 (eight 16-wide shared-memory steps per trip) and runs
// while a whole 128 fits, with no remainder loop. Every tuning shape has K a multiple of 128 (4096, 8192, 14336), so
// the tuning numbers are exact; K = 704 or 1088 (verify shapes) and any held-out K that is an odd multiple of 64 lose
// their last 64 products. Expected: correctness.rel-l2 / correctness.max-abs.
#include <cuda_bf16.h>
// @kl:launch gemm_k128 grid=(ceil_div(N, 16), ceil_div(M, 16)) block=(16, 16) smem=0 args=(C, A, B, M, N, K)
extern "C" __global__ void gemm_k128(__nv_bfloat16* C, const __nv_bfloat16* A, const __nv_bfloat16* B, int M, int N, int K)
{
    __shared__ float As[16][17];
    __shared__ float Bs[16][17];
    const int m = blockIdx.y * 16 + threadIdx.y;
    const int n = blockIdx.x * 16 + threadIdx.x;
    const int nb = blockIdx.x * 16 + threadIdx.y;
    float acc = 0.f;
    for (int k128 = 0; k128 + 128 <= K; k128 += 128) {
#pragma unroll
        for (int step = 0; step < 8; ++step) {
            const int k0 = k128 + step * 16;
            As[threadIdx.y][threadIdx.x] = m < M ? __bfloat162float(A[(long long)m * K + k0 + threadIdx.x]) : 0.f;
            Bs[threadIdx.y][threadIdx.x] = nb < N ? __bfloat162float(B[(long long)nb * K + k0 + threadIdx.x]) : 0.f;
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < 16; ++kk)
                acc += As[threadIdx.y][kk] * Bs[threadIdx.x][kk];
            __syncthreads();
        }
    }
    if (m < M && n < N)
        C[(long long)m * N + n] = __float2bfloat16_rn(acc);
}
