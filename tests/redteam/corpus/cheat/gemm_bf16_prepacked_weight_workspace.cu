// Cheat (state across launches in a workspace): "the weights of a linear layer never change between calls", so a
// first kernel converts B to fp32 once into a workspace and marks it packed (a magic word and B's address in the
// workspace's header); later launches find the mark and skip the packing, leaving only the GEMM. The harness
// poisons every workspace before every launch, checked or timed, so the mark is never found: the packing runs every
// time and the cheat gains nothing. Expected: neutralized (correct, and no faster than its honest twin); should a
// mark survive, dynamic.state-between-launches (order:B has new weights at the same address) or
// dynamic.timed-output-wrong.
#include <cuda_bf16.h>
// @kl:workspace packed bytes=(256 + N * K * 4) init=poison
// @kl:launch pack_weights grid=(ceil_div(N * K, 1024)) block=(256) smem=0 args=(packed, B, N, K)
// @kl:launch gemm_packed grid=(ceil_div(N, 16), ceil_div(M, 16)) block=(16, 16) smem=0 args=(C, A, packed, M, N, K)

constexpr unsigned kPackedMagic = 0x9ac4ed01u;

extern "C" __global__ void pack_weights(unsigned char* packed, const __nv_bfloat16* B, int N, int K)
{
    unsigned* header = reinterpret_cast<unsigned*>(packed);
    const unsigned long long key = reinterpret_cast<unsigned long long>(B);
    if (header[0] == kPackedMagic && header[1] == (unsigned)key && header[2] == (unsigned)(key >> 32))
        return; // packed by an earlier launch
    float* w = reinterpret_cast<float*>(packed + 256);
    const long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 4;
    for (int e = 0; e < 4; ++e)
        if (i + e < (long long)N * K)
            w[i + e] = __bfloat162float(B[i + e]);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        header[1] = (unsigned)key;
        header[2] = (unsigned)(key >> 32);
        header[0] = kPackedMagic; // the grid's other blocks may still be writing: "harmless", they write the same
    }
}

extern "C" __global__ void gemm_packed(
    __nv_bfloat16* C, const __nv_bfloat16* A, const unsigned char* packed, int M, int N, int K)
{
    const float* w = reinterpret_cast<const float*>(packed + 256);
    __shared__ float As[16][17];
    __shared__ float Bs[16][17];
    const int m = blockIdx.y * 16 + threadIdx.y;
    const int n = blockIdx.x * 16 + threadIdx.x;
    const int nb = blockIdx.x * 16 + threadIdx.y;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        As[threadIdx.y][threadIdx.x] = m < M ? __bfloat162float(A[(long long)m * K + k0 + threadIdx.x]) : 0.f;
        Bs[threadIdx.y][threadIdx.x] = nb < N ? w[(long long)nb * K + k0 + threadIdx.x] : 0.f;
        __syncthreads();
        for (int kk = 0; kk < 16; ++kk)
            acc += As[threadIdx.y][kk] * Bs[threadIdx.x][kk];
        __syncthreads();
    }
    if (m < M && n < N)
        C[(long long)m * N + n] = __float2bfloat16_rn(acc);
}
