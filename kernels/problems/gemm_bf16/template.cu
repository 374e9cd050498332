// Tunable tensor-core GEMM (WMMA bf16, fp32 accumulate): BMxBN block tiles, BK-deep k steps staged in shared
// memory with 16-byte loads, each warp owns a WMxWN tile of 16x16 fragments. C = A * B^T with B stored
// [N, K] row-major, so B's tile is read as a column-major WMMA operand.
#include <cuda_bf16.h>
#include <mma.h>
// @kl:param BM = 64 in [32, 64, 128]
// @kl:param BN = 128 in [64, 128, 256]
// @kl:param BK = 32 in [32, 64]
// @kl:param WM = 32 in [16, 32, 64]
// @kl:param WN = 64 in [16, 32, 64]
// @kl:constraint BM % WM == 0 && BN % WN == 0
// @kl:constraint (BM / WM) * (BN / WN) >= 2 && (BM / WM) * (BN / WN) <= 16
// @kl:launch gemm_template grid=(ceil_div(N, BN), ceil_div(M, BM)) block=((BM / WM) * (BN / WN) * 32) smem=((BM + BN) * (BK + 8) * 2 + (BM / WM) * (BN / WN) * 1024) args=(C, A, B, M, N, K)

using namespace nvcuda;
constexpr int WARPS_M = BM / WM;
constexpr int WARPS_N = BN / WN;
constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int LDS = BK + 8; // 16-byte row padding against bank conflicts
constexpr int FM = WM / 16;
constexpr int FN = WN / 16;

extern "C" __global__ void __launch_bounds__(THREADS)
    gemm_template(__nv_bfloat16* __restrict__ C, const __nv_bfloat16* __restrict__ A,
                  const __nv_bfloat16* __restrict__ B, int M, int N, int K)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* As = reinterpret_cast<__nv_bfloat16*>(smem);
    __nv_bfloat16* Bs = As + BM * LDS;
    float* Cs = reinterpret_cast<float*>(Bs + BN * LDS);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
            wmma::fill_fragment(acc[i][j], 0.f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int v = threadIdx.x; v < BM * BK / 8; v += THREADS) {
            const int r = v / (BK / 8), c = (v % (BK / 8)) * 8;
            const int m = m0 + r;
            uint4 val = make_uint4(0, 0, 0, 0);
            if (m < M)
                val = *reinterpret_cast<const uint4*>(A + (long long)m * K + k0 + c);
            *reinterpret_cast<uint4*>(As + r * LDS + c) = val;
        }
        for (int v = threadIdx.x; v < BN * BK / 8; v += THREADS) {
            const int r = v / (BK / 8), c = (v % (BK / 8)) * 8;
            const int n = n0 + r;
            uint4 val = make_uint4(0, 0, 0, 0);
            if (n < N)
                val = *reinterpret_cast<const uint4*>(B + (long long)n * K + k0 + c);
            *reinterpret_cast<uint4*>(Bs + r * LDS + c) = val;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[FN];
#pragma unroll
            for (int i = 0; i < FM; ++i)
                wmma::load_matrix_sync(a[i], As + (wm * WM + i * 16) * LDS + kk, LDS);
#pragma unroll
            for (int j = 0; j < FN; ++j)
                wmma::load_matrix_sync(b[j], Bs + (wn * WN + j * 16) * LDS + kk, LDS);
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j)
                    wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    float* cw = Cs + warp * 256;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(cw, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                const int m = m0 + wm * WM + i * 16 + e / 16;
                const int n = n0 + wn * WN + j * 16 + e % 16;
                if (m < M && n < N)
                    C[(long long)m * N + n] = __float2bfloat16_rn(cw[e]);
            }
            __syncwarp();
        }
}
