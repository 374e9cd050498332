// Trusted reference: 64x64 tiles in shared memory, each thread accumulates a 4x4 block in KL_ACC.
#include <cuda_bf16.h>
// KL_ACC: the accumulation type. The worker judges with -DKL_ACC=double and measures the default (fp32) build
// against it to set each output's tolerance (kernels/HARNESS.md, "Measured tolerance").
#ifndef KL_ACC
#define KL_ACC float
#endif
// @kl:launch gemm_reference grid=(ceil_div(N, 64), ceil_div(M, 64)) block=(16, 16) smem=0 args=(C, A, B, M, N, K)
extern "C" __global__ void gemm_reference(__nv_bfloat16* C, const __nv_bfloat16* A, const __nv_bfloat16* B, int M,
                                          int N, int K)
{
    __shared__ KL_ACC As[16][65];
    __shared__ KL_ACC Bs[16][65];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
    KL_ACC acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int e = tid; e < 64 * 16; e += 256) {
            const int r = e / 16, kk = e % 16, k = k0 + kk;
            const int m = m0 + r, n = n0 + r;
            As[kk][r] = (m < M && k < K) ? (KL_ACC)__bfloat162float(A[(long long)m * K + k]) : (KL_ACC)0;
            Bs[kk][r] = (n < N && k < K) ? (KL_ACC)__bfloat162float(B[(long long)n * K + k]) : (KL_ACC)0;
        }
        __syncthreads();
        for (int kk = 0; kk < 16; ++kk)
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                    acc[i][j] += As[kk][ty + 16 * i] * Bs[kk][tx + 16 * j];
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M && n < N)
                C[(long long)m * N + n] = __float2bfloat16_rn((float)acc[i][j]);
        }
}
