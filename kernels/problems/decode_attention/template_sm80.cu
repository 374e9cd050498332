// Template (sm_80+): split-KV decode (flash-decoding) on tensor cores. A CTA takes one (split, KV head, sequence)
// and serves all G = HQ / HKV query heads from one read of each K/V row: S = Q . K^T with mma.sync m16n8k16 (the G
// heads padded to 16 rows, Q's fragments in registers for the whole CTA), an online softmax in fp32 on the
// accumulator fragments (exp2 of log2e-prescaled scores), then O += P . V with P re-packed from the score fragments
// (no shared-memory round trip) and V read by ldmatrix.trans. K and V tiles of TILE tokens stream through a ring of
// STAGES shared-memory buffers filled by 16-byte cp.async.cg (rows XOR-swizzled by 16-byte chunk so ldmatrix is
// conflict-free; tokens past the split zero-filled so no stale bits reach P . V); the loads of tile i + STAGES - 1
// are issued before tile i's math. Each warp takes TILE / WARPS tokens of every tile with its own (m, l, acc), so
// no barrier sits between a warp's S and its PV; the warps merge through shared memory at the end.
// Splits: WAVES x SM_COUNT / (B x HKV), rounded down, so the grid is at most WAVES CTAs per SM: every CTA is
// resident from the start and streams one contiguous range of its sequence to the end, with the fewest partials to
// merge and pipeline fills to pay (a batch that fills the machine gets one split); at least one, at most 64 and one
// per TILE tokens. SM_COUNT enters capped at 256 so the workspace, which cannot name it, bounds every grid. One
// split writes the output itself and the merge kernel's grid is 0 (the launch is not made); otherwise each split writes
// an unnormalised partial (acc, m, l), a split with no tokens the neutral one (m = -inf, l = 0), and the merge
// kernel combines a head's splits. The split count reaches the merge kernel through the workspace's first word
// (written by every launch, so nothing crosses launches).
#include <cuda_bf16.h>
// @kl:param TILE = 64 in [32, 64, 128]
// @kl:param WARPS = 4 in [1, 2, 4, 8]
// @kl:param STAGES = 3 in [2, 3, 4, 5, 6]
// @kl:param WAVES = 2 in [1, 2, 3, 4, 6, 8]
// @kl:constraint ARCH >= 80
// @kl:constraint TILE % (16 * WARPS) == 0
// @kl:constraint TILE / WARPS <= 32
// @kl:constraint STAGES * TILE * 512 <= (ARCH >= 90 ? 227 * 1024 : ARCH == 80 ? 163 * 1024 : 99 * 1024)
// @kl:workspace partials bytes=(16 + B * HQ * min(min(max(div(WAVES * 256, B * HKV), 1), 64), ceil_div(MAXP * PS, TILE)) * (D + 2) * 4) init=poison
// @kl:launch decode_attention_split grid=(min(min(max(div(WAVES * min(SM_COUNT, 256), B * HKV), 1), 64), ceil_div(MAXP * PS, TILE)), HKV, B) block=(WARPS * 32) smem=(STAGES * TILE * 512) args=(partials, out, q, k_cache, v_cache, block_table, seq_lens, HQ, PS, MAXP, HKV, scale)
// @kl:launch decode_attention_merge grid=(min(min(max(div(WAVES * min(SM_COUNT, 256), B * HKV), 1), 64), ceil_div(MAXP * PS, TILE)) > 1 ? B * HQ : 0) block=(D) smem=0 args=(out, partials)

constexpr int kD = 128;
constexpr int kRowBytes = kD * 2; // one token's row of one head in shared memory
constexpr int kTokensPerWarp = TILE / WARPS;
constexpr int kScoreTiles = kTokensPerWarp / 8; // n8 tiles of S per warp and tile
constexpr int kDTiles = kD / 8; // n8 tiles of O
constexpr int kThreads = WARPS * 32;
constexpr int kStageBytes = TILE * kRowBytes * 2; // K then V
constexpr int kReduceStride = kD + 8; // floats per row of a warp's partial O: 8 banks apart, no 8-way conflict

__device__ __forceinline__ float negInf()
{
    return __int_as_float(0xff800000u);
}

__device__ __forceinline__ unsigned sharedAddress(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Byte offset of 16-byte chunk c (0..15) of row r: the chunk index XOR r % 8 spreads an 8x8 ldmatrix over banks.
__device__ __forceinline__ unsigned swizzled(int r, int c)
{
    return r * kRowBytes + ((c ^ (r & 7)) << 4);
}

__device__ __forceinline__ void copyAsync16(unsigned dst, const void* src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void loadMatrices(unsigned addr, unsigned (&r)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void loadMatricesTransposed(unsigned addr, unsigned (&r)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned packBf16(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
}

extern "C" __global__ void __launch_bounds__(kThreads) decode_attention_split(float* partials, __nv_bfloat16* out,
    const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* block_table,
    const int* seq_lens, int HQ, int PS, int MAXP, int HKV, float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, splits = gridDim.x;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, quad = lane % 4;
    const int G = HQ / HKV;
    const float scaleLog2 = scale * 1.4426950408889634f;
    if (split == 0 && kvh == 0 && b == 0 && tid == 0)
        reinterpret_cast<int*>(partials)[0] = splits;

    const int len = seq_lens[b];
    const int tilesPerSplit = ((len + TILE - 1) / TILE + splits - 1) / splits;
    const int tBegin = split * tilesPerSplit * TILE;
    const int tEnd = min(len, tBegin + tilesPerSplit * TILE);
    const int tiles = tEnd > tBegin ? (tEnd - tBegin + TILE - 1) / TILE : 0;

    // Q's A fragments (rows = heads, padded with zeros to 16), unscaled: the scale is applied to S in fp32.
    unsigned qf[kD / 16][4];
    {
        const unsigned* qRows = reinterpret_cast<const unsigned*>(q + ((long long)b * HQ + kvh * G) * kD);
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
            const int c = kk * 8 + quad; // in bf16 pairs
            qf[kk][0] = group < G ? qRows[group * (kD / 2) + c] : 0u;
            qf[kk][1] = group + 8 < G ? qRows[(group + 8) * (kD / 2) + c] : 0u;
            qf[kk][2] = group < G ? qRows[group * (kD / 2) + c + 4] : 0u;
            qf[kk][3] = group + 8 < G ? qRows[(group + 8) * (kD / 2) + c + 4] : 0u;
        }
    }

    const unsigned smemBase = sharedAddress(smem);
    const long long headOffset = (long long)kvh * kD;
    const long long rowStride = (long long)HKV * kD;
    auto loadTile = [&](int i) {
        if (i < tiles) {
            const unsigned stage = smemBase + (i % STAGES) * kStageBytes;
            const int t0 = tBegin + i * TILE;
            const int c = tid % 16;
#pragma unroll
            for (int j = 0; j < TILE * 16 / kThreads; ++j) {
                const int r = tid / 16 + j * (kThreads / 16);
                const int t = t0 + r;
                const bool valid = t < tEnd;
                long long at = 0;
                if (valid) {
                    const long long page = __ldg(block_table + (long long)b * MAXP + t / PS);
                    at = (page * PS + t % PS) * rowStride + headOffset + c * 8;
                }
                copyAsync16(stage + swizzled(r, c), k_cache + at, valid);
                copyAsync16(stage + TILE * kRowBytes + swizzled(r, c), v_cache + at, valid);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };

    float m[2] = { negInf(), negInf() }, l[2] = { 0.f, 0.f };
    float acc[kDTiles][4];
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
            acc[dt][i] = 0.f;

#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i)
        loadTile(i);
    for (int i = 0; i < tiles; ++i) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads(); // tile i landed for every thread, and every warp is done with the stage refilled next
        loadTile(i + STAGES - 1);
        const unsigned kTile = smemBase + (i % STAGES) * kStageBytes;
        const unsigned vTile = kTile + TILE * kRowBytes;
        const int r0 = warp * kTokensPerWarp;

        float s[kScoreTiles][4];
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[nt][e] = 0.f;
            const int r = r0 + nt * 8 + (lane & 7);
#pragma unroll
            for (int kk = 0; kk < kD / 16; kk += 2) {
                unsigned kf[4];
                loadMatrices(kTile + swizzled(r, kk * 2 + lane / 8), kf);
                mma16816(s[nt], qf[kk], kf[0], kf[1]);
                mma16816(s[nt], qf[kk + 1], kf[2], kf[3]);
            }
        }

        // Online softmax; rows group and group + 8, the row's values spread over the quad's 4 lanes.
        const int tFirst = tBegin + i * TILE + r0 + quad * 2;
        float rowMax[2] = { negInf(), negInf() };
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const bool valid = tFirst + nt * 8 + (e & 1) < tEnd;
                s[nt][e] = valid ? s[nt][e] * scaleLog2 : negInf();
                rowMax[e / 2] = fmaxf(rowMax[e / 2], s[nt][e]);
            }
        float base[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            rowMax[h] = fmaxf(rowMax[h], __shfl_xor_sync(0xffffffffu, rowMax[h], 1));
            rowMax[h] = fmaxf(rowMax[h], __shfl_xor_sync(0xffffffffu, rowMax[h], 2));
            const float mNew = fmaxf(m[h], rowMax[h]);
            base[h] = mNew == negInf() ? 0.f : mNew; // a row with no token yet: exp2(-inf - 0) = 0, not NaN
            const float correction = exp2f(m[h] - base[h]);
            l[h] *= correction;
#pragma unroll
            for (int dt = 0; dt < kDTiles; ++dt) {
                acc[dt][2 * h] *= correction;
                acc[dt][2 * h + 1] *= correction;
            }
            m[h] = mNew;
        }
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[nt][e] = exp2f(s[nt][e] - base[e / 2]);
                l[e / 2] += s[nt][e];
            }

        // O += P . V: the score tiles 2j and 2j + 1 are the A fragment of tokens 16j .. 16j + 15.
#pragma unroll
        for (int j = 0; j < kTokensPerWarp / 16; ++j) {
            const unsigned pf[4] = { packBf16(s[2 * j][0], s[2 * j][1]), packBf16(s[2 * j][2], s[2 * j][3]),
                packBf16(s[2 * j + 1][0], s[2 * j + 1][1]), packBf16(s[2 * j + 1][2], s[2 * j + 1][3]) };
            const int r = r0 + j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
            for (int dt = 0; dt < kDTiles; dt += 2) {
                unsigned vf[4];
                loadMatricesTransposed(vTile + swizzled(r, dt + lane / 16), vf);
                mma16816(acc[dt], pf, vf[0], vf[1]);
                mma16816(acc[dt + 1], pf, vf[2], vf[3]);
            }
        }
    }

    // Merge the warps: each writes its (m, l, acc) over the ring, then thread i combines (head i / D, dim i % D).
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    float* reduceAcc = reinterpret_cast<float*>(smem);
    float* reduceMl = reduceAcc + WARPS * 16 * kReduceStride;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const int row = group + 8 * h;
        if (quad == 0)
            *reinterpret_cast<float2*>(reduceMl + (warp * 16 + row) * 2) = make_float2(m[h], l[h]);
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt)
            *reinterpret_cast<float2*>(reduceAcc + (warp * 16 + row) * kReduceStride + dt * 8 + quad * 2)
                = make_float2(acc[dt][2 * h], acc[dt][2 * h + 1]);
    }
    __syncthreads();
    const long long totalRows = (long long)gridDim.z * HQ * splits;
    for (int i = tid; i < G * kD; i += kThreads) {
        const int row = i / kD, d = i % kD;
        float mMax = negInf();
#pragma unroll
        for (int w = 0; w < WARPS; ++w)
            mMax = fmaxf(mMax, reduceMl[(w * 16 + row) * 2]);
        float sum = 0.f, o = 0.f;
        if (mMax != negInf())
#pragma unroll
            for (int w = 0; w < WARPS; ++w) {
                const float weight = exp2f(reduceMl[(w * 16 + row) * 2] - mMax);
                sum += weight * reduceMl[(w * 16 + row) * 2 + 1];
                o += weight * reduceAcc[(w * 16 + row) * kReduceStride + d];
            }
        const long long head = (long long)b * HQ + kvh * G + row;
        if (splits == 1) {
            out[head * kD + d] = __float2bfloat16_rn(o / sum);
        } else {
            const long long p = head * splits + split;
            partials[4 + p * kD + d] = o;
            if (d == 0)
                reinterpret_cast<float2*>(partials + 4 + totalRows * kD)[p] = make_float2(mMax, sum);
        }
    }
}

extern "C" __global__ void __launch_bounds__(kD) decode_attention_merge(__nv_bfloat16* out, const float* partials)
{
    const int splits = reinterpret_cast<const int*>(partials)[0];
    const long long head = blockIdx.x;
    const int d = threadIdx.x;
    const long long totalRows = (long long)gridDim.x * splits;
    const float* acc = partials + 4 + head * splits * kD;
    const float2* ml = reinterpret_cast<const float2*>(partials + 4 + totalRows * kD) + head * splits;
    float mMax = negInf();
    for (int s = 0; s < splits; ++s)
        mMax = fmaxf(mMax, ml[s].x);
    float sum = 0.f, o = 0.f;
    for (int s = 0; s < splits; ++s) {
        const float2 v = ml[s];
        const float weight = v.x == negInf() ? 0.f : exp2f(v.x - mMax); // a split with no tokens
        sum += weight * v.y;
        o += weight * acc[(long long)s * kD + d];
    }
    out[head * kD + d] = __float2bfloat16_rn(o / sum);
}
