// Honest: split-K. The K dimension is cut into SPLIT slices; each slice's 32x32 output tile (shared-memory
// tiled, fp32 products) is added into an fp32 workspace with atomicAdd, and a second launch rounds the sums to
// bf16. The workspace is declared (init=zero), so nothing is carried between launches.
#include <cuda_bf16.h>
// @kl:param SPLIT = 4 in [2, 4, 8]
// @kl:workspace acc bytes=M*N*4 init=zero
// @kl:launch split_k_partial grid=(ceil_div(N, 32), ceil_div(M, 32), SPLIT) block=(32, 8) smem=0 args=(acc, A, B, M, N, K)
// @kl:launch split_k_round grid=(ceil_div(M * N, 256)) block=(256) smem=0 args=(C, acc, M, N)
__global__ void split_k_partial(float* acc, const __nv_bfloat16* A, const __nv_bfloat16* B, int M, int N, int K)
{
    __shared__ float As[32][33];
    __shared__ float Bs[32][33];
    const int m0 = blockIdx.y * 32, n0 = blockIdx.x * 32;
    const int slice = (K + SPLIT - 1) / SPLIT;
    const int k_begin = blockIdx.z * slice;
    const int k_end = min(K, k_begin + slice);
    const int tx = threadIdx.x, ty = threadIdx.y;
    float sum[4] = { 0.f, 0.f, 0.f, 0.f };
    for (int k0 = k_begin; k0 < k_end; k0 += 32) {
        for (int r = ty; r < 32; r += 8) {
            const int k = k0 + tx;
            As[r][tx] = (m0 + r < M && k < k_end) ? __bfloat162float(A[(size_t)(m0 + r) * K + k]) : 0.f;
            Bs[r][tx] = (n0 + r < N && k < k_end) ? __bfloat162float(B[(size_t)(n0 + r) * K + k]) : 0.f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < 32; ++kk) {
            const float b = Bs[tx][kk];
#pragma unroll
            for (int q = 0; q < 4; ++q)
                sum[q] += As[ty + 8 * q][kk] * b;
        }
        __syncthreads();
    }
    const int n = n0 + tx;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const int m = m0 + ty + 8 * q;
        if (m < M && n < N)
            atomicAdd(&acc[(size_t)m * N + n], sum[q]);
    }
}

__global__ void split_k_round(__nv_bfloat16* C, const float* acc, int M, int N)
{
    const size_t i = (size_t)blockIdx.x * 256 + threadIdx.x;
    if (i < (size_t)M * N)
        C[i] = __float2bfloat16(acc[i]);
}
