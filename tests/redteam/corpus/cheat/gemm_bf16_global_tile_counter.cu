// Cheat (state between launches in a __device__ global): a persistent GEMM with a dynamic tile scheduler. Blocks
// take the next 32x32 tile from a global atomic counter, and the last block to finish resets it for the next
// launch, as stream-K kernels in the wild do with a static counter. The counter outlives the launch: a launch that
// is cut short (or a cheat that keeps the count) changes what the next launch computes, and the harness cannot
// re-initialise memory it was never told about. The honest form is a declared @kl:workspace with init=zero.
// Expected: static.mutable-global.
#include <cuda_bf16.h>
// @kl:launch gemm_tile_queue grid=(SM_COUNT) block=(32, 8) smem=0 args=(C, A, B, M, N, K)

__device__ unsigned int g_next_tile;
__device__ unsigned int g_done_blocks;

extern "C" __global__ void gemm_tile_queue(
    __nv_bfloat16* C, const __nv_bfloat16* A, const __nv_bfloat16* B, int M, int N, int K)
{
    __shared__ float As[32][33];
    __shared__ float Bs[32][33];
    __shared__ unsigned tile;
    const int tilesN = (N + 31) / 32, tiles = tilesN * ((M + 31) / 32);
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (;;) {
        if (tx == 0 && ty == 0)
            tile = atomicAdd(&g_next_tile, 1u);
        __syncthreads();
        const unsigned t = tile;
        __syncthreads();
        if (t >= (unsigned)tiles)
            break;
        const int m0 = (t / tilesN) * 32, n0 = (t % tilesN) * 32;
        float sum[4] = { 0.f, 0.f, 0.f, 0.f };
        for (int k0 = 0; k0 < K; k0 += 32) {
            for (int r = ty; r < 32; r += 8) {
                As[r][tx] = m0 + r < M ? __bfloat162float(A[(long long)(m0 + r) * K + k0 + tx]) : 0.f;
                Bs[r][tx] = n0 + r < N ? __bfloat162float(B[(long long)(n0 + r) * K + k0 + tx]) : 0.f;
            }
            __syncthreads();
            for (int kk = 0; kk < 32; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    sum[i] += As[ty + 8 * i][kk] * Bs[tx][kk];
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (m0 + ty + 8 * i < M && n0 + tx < N)
                C[(long long)(m0 + ty + 8 * i) * N + n0 + tx] = __float2bfloat16_rn(sum[i]);
    }
    if (tx == 0 && ty == 0 && atomicAdd(&g_done_blocks, 1u) == gridDim.x - 1) {
        g_next_tile = 0;
        g_done_blocks = 0;
    }
}
