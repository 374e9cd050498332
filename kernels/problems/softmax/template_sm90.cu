// Softmax for Hopper's long rows: persistent blocks (BPS per SM) stream their rows through a shared-memory ring of
// STAGES chunks of CHUNK halves, fed by one producer thread with bulk copies (cp.async.bulk global -> shared, each
// chunk's mbarrier counting its bytes); THREADS consumer threads keep an online max and sum per thread as chunks land
// (BPS blocks of THREADS + 32 threads and their rings fit an SM together).
// A row of at most STAGES chunks stays in the ring and is written from there (one HBM read and one write); a longer
// row releases each chunk after the first pass and is streamed through the ring a second time for the output.
// Ring slot g (counted over the block's whole walk) is stage g % STAGES, its use g / STAGES: consumers wait for that
// use's parity on full[stage], the producer for the previous use's parity on empty[stage] (THREADS arrivals).
// Not in problem.json's arch_templates: unverified on a GPU (tests/kernels/test_hopper_gpu.cpp SoftmaxSm90Gpu).
#include <cuda_fp16.h>
// @kl:param THREADS = 256 in [128, 256, 512]
// @kl:param CHUNK = 4096 in [2048, 4096, 8192]
// @kl:param STAGES = 8 in [2, 4, 8, 12, 16, 24]
// @kl:param BPS = 2 in [1, 2, 3, 4]
// @kl:constraint CHUNK >= 8 * THREADS
// @kl:constraint STAGES * CHUNK * 2 <= 200 * 1024
// @kl:constraint BPS * (STAGES * CHUNK * 2 + 2048) <= 233472
// @kl:constraint BPS * (THREADS + 32) <= 2048
// @kl:launch softmax_ring grid=(min(R, SM_COUNT * BPS)) block=(THREADS + 32) smem=(STAGES * CHUNK * 2) args=(y, x, R, C)

struct alignas(16) V {
    __half v[8];
};
constexpr int kVecs = CHUNK / 8; // 16-byte vectors per chunk
constexpr int kWarps = THREADS / 32;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float negInf() { return __int_as_float(0xff800000); }

// exp2 on the special-function unit; (x - max) is formed exactly in fp32 first, so accuracy stays fp32-like.
__device__ __forceinline__ float scaledExp(float x, float m)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"((x - m) * kLog2e));
    return r;
}

// (m, s) absorbs (m2, s2): s is a sum of exp(x - m) over what it has seen.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2)
{
    const float mm = fmaxf(m, m2);
    if (mm == negInf())
        return;
    s = s * scaledExp(m, mm) + s2 * scaledExp(m2, mm);
    m = mm;
}

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_arrive(unsigned long long* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity)
{
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}

// bytes (a multiple of 16) from global src into shared dst, counted on bar, which expects them.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(dst)), "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

// The consumer threads only (the producer warp does not take part): named barrier 1.
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory"); }

extern "C" __global__ void __launch_bounds__(THREADS + 32, BPS)
    softmax_ring(__half* __restrict__ y, const __half* __restrict__ x, int R, int C)
{
    extern __shared__ __align__(128) unsigned char ringBytes[];
    V* ring = reinterpret_cast<V*>(ringBytes);
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    __shared__ float2 warpPart[2][kWarps]; // by row parity: a warp a row ahead never overwrites what others read
    const int chunks = (C + CHUNK - 1) / CHUNK;
    const bool kept = chunks <= STAGES; // the row stays in the ring for the output
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], THREADS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (threadIdx.x >= THREADS) { // the producer: the same walk of slots as the consumers, STAGES ahead at most
        if (threadIdx.x != THREADS)
            return;
        unsigned g = 0;
        for (int row = blockIdx.x; row < R; row += gridDim.x)
            for (int pass = 0; pass < (kept ? 1 : 2); ++pass)
                for (int k = 0; k < chunks; ++k, ++g) {
                    const unsigned stage = g % STAGES, use = g / STAGES;
                    if (use > 0)
                        mbar_wait(&empty[stage], (use - 1) & 1);
                    const int first = k * CHUNK;
                    const unsigned bytes = static_cast<unsigned>(min(CHUNK, C - first)) * 2u;
                    bulk_load(ring + stage * kVecs, x + (long long)row * C + first, bytes, &full[stage]);
                }
        return;
    }

    const int t = threadIdx.x;
    unsigned g = 0;
    for (int row = blockIdx.x; row < R; row += gridDim.x) {
        // Pass 1: this thread's online max and sum over vectors t, t + THREADS, ... of every chunk.
        float m = negInf(), s = 0.f;
        for (int k = 0; k < chunks; ++k) {
            const unsigned slot = g + k, stage = slot % STAGES;
            mbar_wait(&full[stage], (slot / STAGES) & 1);
            const int nv = min(kVecs, (C - k * CHUNK) / 8);
            const V* chunk = ring + stage * kVecs;
            // The chunk's max first, then the sum against the running max: one exp per element and one per chunk.
            float cm = m;
            for (int i = t; i < nv; i += THREADS) {
                const V v = chunk[i];
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    cm = fmaxf(cm, __half2float(v.v[e]));
            }
            if (cm != negInf()) {
                s *= scaledExp(m, cm); // 0 while m is -inf (s is 0 then too)
                m = cm;
                for (int i = t; i < nv; i += THREADS) {
                    const V v = chunk[i];
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        s += scaledExp(__half2float(v.v[e]), m);
                }
            }
            if (!kept)
                mbar_arrive(&empty[stage]);
        }
        // The row's max and sum: over the warp, then over the warps in a fixed order (every thread gets the same).
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            merge(m, s, m2, s2);
        }
        const int parity = (row / gridDim.x) & 1;
        if (t % 32 == 0)
            warpPart[parity][t / 32] = make_float2(m, s);
        consumers_sync();
        float rowMax = negInf(), rowSum = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
            merge(rowMax, rowSum, warpPart[parity][w].x, warpPart[parity][w].y);
        const float inv = 1.f / rowSum;

        // Pass 2: the output, from the chunks still in the ring or from a second stream of the row.
        if (!kept)
            g += chunks;
        __half* yr = y + (long long)row * C;
        for (int k = 0; k < chunks; ++k) {
            const unsigned slot = g + k, stage = slot % STAGES;
            if (!kept)
                mbar_wait(&full[stage], (slot / STAGES) & 1);
            const int nv = min(kVecs, (C - k * CHUNK) / 8);
            const V* chunk = ring + stage * kVecs;
            V* out = reinterpret_cast<V*>(yr + k * CHUNK);
            for (int i = t; i < nv; i += THREADS) {
                const V v = chunk[i];
                V o;
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    o.v[e] = __float2half_rn(scaledExp(__half2float(v.v[e]), rowMax) * inv);
                out[i] = o;
            }
            mbar_arrive(&empty[stage]);
        }
        g += chunks;
    }
}
