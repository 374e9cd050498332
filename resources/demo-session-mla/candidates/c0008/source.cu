// Candidate for mla_decode, the engineer's hypothesis: load each latent KV block once per CTA, share it across the
// heads, and pipeline the next block's load under the current block's math. A CTA takes 64 query rows (heads) of one
// (sequence, query row j) and one KV split; the two CTAs of a (sequence, j) are adjacent in blockIdx.x, as are the
// SQ rows of a sequence, so every KV row comes from HBM once and from L2 for the others.
// Physics: per token and head 2 * (576 + 512) = 2176 FLOP, per token 1152 bytes of KV; 128 heads make 242 FLOP/byte,
// so at SQ = 1 the problem is compute-bound on an H200 (bf16 ~700 TFLOP/s measured: at most ~2.9 TB/s of KV, ~68%
// of copy bandwidth). The goal is tensor-core throughput with each KV row read once.
// Math on mma.sync m16n8k16 (bf16 in, fp32 accumulate), 8 warps. Q (64 x 576) stays in shared memory, read by
// ldmatrix. KV tiles of BN tokens stream through a ring of STAGES buffers filled by 16-byte cp.async.cg (1152-byte
// rows, a multiple of 128, so chunks are XOR-swizzled by row to keep ldmatrix conflict-free; tokens past the split or
// the row's visible length are zero-filled and their scores -inf); tile i + STAGES - 1 is issued before tile i's math.
// S = Q K^T: warp (r, h) takes rows 16r.. and half h of the tile's tokens; the two halves exchange row maxima through
// shared memory (online softmax in fp32, exp2 of log2e-prescaled scores; each half keeps its own row sum). P (bf16)
// goes to shared memory over the tile's rope columns, dead once S is done. O += P V: warp (r, c) owns rows 32r..
// and V columns 128c.. (32 x 128 fp32, 128 registers), V being the first 512 columns of the same tile
// (ldmatrix.trans); 32-row warp tiles halve V's shared-memory reads against 16-row ones.
// Splits: WAVES x SM_COUNT / (B x SQ x 2) CTAs per row block, at least one, at most 64 and one per tile (SM_COUNT
// capped at 256 so the workspace bounds every grid). One split writes the output and the merge is not launched;
// otherwise each split writes an unnormalised partial (O, m, l), an empty split the neutral one (m = -inf, l = 0),
// and the merge combines a row's splits. The split count reaches the merge through the workspace's first word.
#include <cuda_bf16.h>
// @kl:param BN = 64 in [32, 64]
// @kl:param STAGES = 2 in [2, 3, 4]
// @kl:param WAVES = 1 in [1, 2, 3, 4]
// @kl:constraint ARCH >= 80
// @kl:constraint PS % BN == 0
// @kl:constraint 64 * DK * 2 + STAGES * BN * DK * 2 + 1536 <= (ARCH >= 90 ? 227 * 1024 : ARCH == 80 ? 163 * 1024 : 99 * 1024)
// @kl:workspace partials bytes=(16 + B * SQ * HQ * min(min(max(div(WAVES * 256, B * SQ * 2), 1), 64), ceil_div(MAXP * PS, BN)) * (DV + 2) * 4) init=poison
// @kl:launch mla_decode_split grid=(B * SQ * 2, min(min(max(div(WAVES * min(SM_COUNT, 256), B * SQ * 2), 1), 64), ceil_div(MAXP * PS, BN))) block=(256) smem=(64 * DK * 2 + STAGES * BN * DK * 2 + 1536) args=(partials, out, q, kv_cache, block_table, seq_lens, SQ, MAXP, scale)
// @kl:launch mla_decode_merge grid=(min(min(max(div(WAVES * min(SM_COUNT, 256), B * SQ * 2), 1), 64), ceil_div(MAXP * PS, BN)) > 1 ? B * SQ * HQ : 0) block=(128) smem=0 args=(out, partials)

constexpr int kDK = 576, kDV = 512, kPS = 64;
constexpr int kRows = 64; // query rows of a CTA
constexpr int kRowBytes = kDK * 2;
constexpr int kChunks = kDK / 8; // 16-byte chunks of a row
constexpr int kThreads = 256;
constexpr int kQBytes = kRows * kRowBytes;
constexpr int kStageBytes = BN * kRowBytes;
constexpr int kSTokens = BN / 2; // tokens of an S warp
constexpr int kSTiles = kSTokens / 8;
constexpr int kVCols = 128; // V columns of a PV warp
constexpr int kVTiles = kVCols / 8;
constexpr int kPChunks = BN / 8; // 16-byte chunks of a P row
constexpr int kPRowTile = 2 * kPChunks * kRowBytes; // P's 16 rows further down (kPChunks / 8 tile rows a P row)

__device__ __forceinline__ float negInf()
{
    return __int_as_float(0xff800000u);
}

__device__ __forceinline__ unsigned sharedAddress(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Byte offset of chunk c of row r: the chunk's low 3 bits XOR r % 8 spread an 8-row ldmatrix over the banks.
__device__ __forceinline__ unsigned swizzled(int r, int c)
{
    return r * kRowBytes + ((c ^ (r & 7)) << 4);
}

// P (64 rows x BN tokens) packed row-major into the tile's rope chunks 64..71, swizzled like the rest of the row.
__device__ __forceinline__ unsigned pChunk(int r, int c)
{
    const int linear = r * kPChunks + c;
    return swizzled(linear / 8, 64 + linear % 8);
}

__device__ __forceinline__ void copyAsync16(unsigned dst, const void* src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

// Copies ROWS rows of 576 into a swizzled tile, 8 threads a row and 32 rows a pass (a thread's chunks tid % 8 + 8 c
// lie 128 c bytes apart after the swizzle). rowAt(r) is row r's first element, or null for a row to zero-fill.
template <int ROWS, typename RowAt>
__device__ __forceinline__ void copyRows(unsigned dst, const __nv_bfloat16* anyRow, RowAt rowAt)
{
    const int tid = threadIdx.x;
#pragma unroll
    for (int k = 0; k < ROWS / 32; ++k) {
        const int r = tid / 8 + 32 * k;
        const __nv_bfloat16* row = rowAt(r);
        const unsigned to = dst + swizzled(r, tid % 8);
        const __nv_bfloat16* from = (row ? row : anyRow) + (tid % 8) * 8;
#pragma unroll
        for (int c = 0; c < kChunks / 8; ++c)
            copyAsync16(to + c * 128, from + c * 64, row != nullptr);
    }
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

extern "C" __global__ void __launch_bounds__(kThreads, 1) mla_decode_split(float* partials, __nv_bfloat16* out,
    const __nv_bfloat16* q, const __nv_bfloat16* kv_cache, const int* block_table, const int* seq_lens, int SQ,
    int MAXP, float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int rowBlock = blockIdx.x; // (b * SQ + j) * 2 + half: query rows rowBlock * 64 .. + 63
    const int b = rowBlock / (2 * SQ), j = (rowBlock / 2) % SQ;
    const int split = blockIdx.y, splits = gridDim.y;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, group = lane / 4, quad = lane % 4;
    const float scaleLog2 = scale * 1.4426950408889634f;
    if (rowBlock == 0 && split == 0 && tid == 0)
        reinterpret_cast<int*>(partials)[0] = splits;

    // Splits cut the sequence's tiles alike for every j (so the CTAs of a sequence read the same rows); row j sees
    // the tokens before seq_len - SQ + 1 + j.
    const int len = seq_lens[b];
    const int tilesPerSplit = ((len + BN - 1) / BN + splits - 1) / splits;
    const int tBegin = split * tilesPerSplit * BN;
    const int tEnd = min(len - SQ + 1 + j, tBegin + tilesPerSplit * BN);
    const int tiles = tEnd > tBegin ? (tEnd - tBegin + BN - 1) / BN : 0;

    const unsigned qBase = sharedAddress(smem);
    float* exchange = reinterpret_cast<float*>(smem + kQBytes + STAGES * kStageBytes);
    float* tileMaxShared = exchange; // [2][64]: each S half's row maxima of the tile
    float* correctionShared = exchange + 128; // [64]
    float* lShared = exchange + 192; // [2][64]
    float* mShared = exchange + 320; // [64]

    const long long rowBase = (long long)rowBlock * kRows;
    const __nv_bfloat16* qTile = q + rowBase * kDK;
    copyRows<kRows>(qBase, qTile, [&](int r) { return qTile + r * kDK; });
    // A tile lies in one page: it starts at a multiple of BN, which divides PS.
    auto loadTile = [&](int i) {
        if (i < tiles) {
            const unsigned stage = qBase + kQBytes + (i % STAGES) * kStageBytes;
            const int t0 = tBegin + i * BN;
            const long long page = __ldg(block_table + (long long)b * MAXP + t0 / kPS);
            const __nv_bfloat16* rows = kv_cache + (page * kPS + t0 % kPS) * kDK;
            copyRows<BN>(stage, rows, [&](int r) { return t0 + r < tEnd ? rows + r * kDK : nullptr; });
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };

    const int sRow0 = (warp & 3) * 16, sHalf = warp >> 2, sTok0 = sHalf * kSTokens;
    const int vRow0 = (warp & 1) * 32, vCol0 = (warp >> 1) * kVCols;
    // Each lane's ldmatrix offsets within the first 128-byte segment of its rows: the swizzle changes only a chunk's
    // low 3 bits, so the segment a of a row is these plus 128 a, and 8 rows further down plus 8 rows' bytes.
    unsigned qLane[4], kLane[2], vLane[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        qLane[k] = swizzled(sRow0 + (lane & 15), 2 * k + lane / 16);
        vLane[k] = swizzled((lane & 7) + ((lane >> 3) & 1) * 8, vCol0 / 8 + 2 * k + lane / 16);
    }
#pragma unroll
    for (int e = 0; e < 2; ++e)
        kLane[e] = swizzled(sTok0 + (lane & 7), 4 * e + lane / 8);
    // P's chunk 2 kt + lane / 16: rows start at multiples of 128 bytes, so the chunk bits XOR in.
    const unsigned pLane = pChunk(vRow0 + (lane & 15), lane / 16);
    float m[2] = { negInf(), negInf() }, l[2] = { 0.f, 0.f }; // S rows sRow0 + group (+ 8)
    float acc[2][kVTiles][4];
#pragma unroll
    for (int rt = 0; rt < 2; ++rt)
#pragma unroll
        for (int dt = 0; dt < kVTiles; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[rt][dt][e] = 0.f;

#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i)
        loadTile(i);
    for (int i = 0; i < tiles; ++i) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads(); // tile i (and Q) landed for every thread; every warp is done with the stage refilled next
        loadTile(i + STAGES - 1);
        unsigned char* tilePtr = smem + kQBytes + (i % STAGES) * kStageBytes;
        const unsigned tile = sharedAddress(tilePtr);

        float s[kSTiles][4];
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[nt][e] = 0.f;
#pragma unroll
        for (int a = 0; a < kChunks / 8; ++a)
#pragma unroll
            for (int e = 0; e < 2; ++e) { // k-steps 4a + 2e and 4a + 2e + 1
                unsigned qa[2][4];
                loadMatrices(qBase + qLane[2 * e] + a * 128, qa[0]);
                loadMatrices(qBase + qLane[2 * e + 1] + a * 128, qa[1]);
#pragma unroll
                for (int nt = 0; nt < kSTiles; ++nt) {
                    unsigned kf[4];
                    loadMatrices(tile + kLane[e] + nt * 8 * kRowBytes + a * 128, kf);
                    mma16816(s[nt], qa[0], kf[0], kf[1]);
                    mma16816(s[nt], qa[1], kf[2], kf[3]);
                }
            }

        // Rows group and group + 8 of the warp, a row's values spread over the quad's 4 lanes.
        const int tFirst = tBegin + i * BN + sTok0 + quad * 2;
        float tileMax[2] = { negInf(), negInf() };
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[nt][e] = tFirst + nt * 8 + (e & 1) < tEnd ? s[nt][e] * scaleLog2 : negInf();
                tileMax[e / 2] = fmaxf(tileMax[e / 2], s[nt][e]);
            }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            tileMax[h] = fmaxf(tileMax[h], __shfl_xor_sync(0xffffffffu, tileMax[h], 1));
            tileMax[h] = fmaxf(tileMax[h], __shfl_xor_sync(0xffffffffu, tileMax[h], 2));
            if (quad == 0)
                tileMaxShared[sHalf * kRows + sRow0 + group + 8 * h] = tileMax[h];
        }
        __syncthreads(); // both halves' maxima are out, and every warp is done reading the rope columns
        float base[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = sRow0 + group + 8 * h;
            const float mNew = fmaxf(m[h], fmaxf(tileMax[h], tileMaxShared[(1 - sHalf) * kRows + row]));
            base[h] = mNew == negInf() ? 0.f : mNew; // a row with no token yet: exp2(-inf - 0) = 0, not NaN
            const float correction = exp2f(m[h] - base[h]);
            l[h] *= correction;
            m[h] = mNew;
            if (sHalf == 0 && quad == 0)
                correctionShared[row] = correction;
        }
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float p0 = exp2f(s[nt][2 * h] - base[h]), p1 = exp2f(s[nt][2 * h + 1] - base[h]);
                l[h] += p0 + p1;
                *reinterpret_cast<unsigned*>(tilePtr + pChunk(sRow0 + group + 8 * h, sTok0 / 8 + nt) + quad * 4)
                    = packBf16(p0, p1);
            }
        __syncthreads(); // P and the corrections are out

        float correction[2][2];
#pragma unroll
        for (int rt = 0; rt < 2; ++rt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                correction[rt][h] = correctionShared[vRow0 + rt * 16 + group + 8 * h];
#pragma unroll
        for (int rt = 0; rt < 2; ++rt)
#pragma unroll
            for (int dt = 0; dt < kVTiles; ++dt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    acc[rt][dt][e] *= correction[rt][e / 2];
#pragma unroll 1 // a whole tile's P and V fragments prefetched would spill the O accumulators
        for (int kt = 0; kt < BN / 16; ++kt) {
            unsigned pa[2][4];
#pragma unroll
            for (int rt = 0; rt < 2; ++rt)
                loadMatrices(tile + (pLane ^ (kt * 32)) + rt * kPRowTile, pa[rt]);
#pragma unroll
            for (int dt = 0; dt < kVTiles; dt += 2) {
                unsigned vf[4];
                loadMatricesTransposed(tile + vLane[(dt % 8) / 2] + kt * 16 * kRowBytes + (dt / 8) * 128, vf);
#pragma unroll
                for (int rt = 0; rt < 2; ++rt) {
                    mma16816(acc[rt][dt], pa[rt], vf[0], vf[1]);
                    mma16816(acc[rt][dt + 1], pa[rt], vf[2], vf[3]);
                }
            }
        }
    }

    asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const int row = sRow0 + group + 8 * h;
        if (quad == 0) {
            lShared[sHalf * kRows + row] = l[h];
            if (sHalf == 0)
                mShared[row] = m[h];
        }
    }
    __syncthreads();
    const long long rowsTotal = (long long)gridDim.x * kRows * splits;
#pragma unroll
    for (int rt = 0; rt < 2; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = vRow0 + rt * 16 + group + 8 * h;
            const float rowL = lShared[row] + lShared[kRows + row];
            const long long head = rowBase + row;
            if (splits == 1) {
                const float inv = rowL > 0.f ? 1.f / rowL : 0.f;
                __nv_bfloat16* o = out + head * kDV + vCol0 + quad * 2;
#pragma unroll
                for (int dt = 0; dt < kVTiles; ++dt)
                    *reinterpret_cast<__nv_bfloat162*>(o + dt * 8)
                        = __floats2bfloat162_rn(acc[rt][dt][2 * h] * inv, acc[rt][dt][2 * h + 1] * inv);
            } else {
                const long long p = head * splits + split;
                float* o = partials + 4 + p * kDV + vCol0 + quad * 2;
#pragma unroll
                for (int dt = 0; dt < kVTiles; ++dt)
                    *reinterpret_cast<float2*>(o + dt * 8) = make_float2(acc[rt][dt][2 * h], acc[rt][dt][2 * h + 1]);
                if (vCol0 == 0 && quad == 0)
                    reinterpret_cast<float2*>(partials + 4 + rowsTotal * kDV)[p] = make_float2(mShared[row], rowL);
            }
        }
}

// One CTA per query row, 4 output columns a thread: the splits' partials weighted by exp2(m - max m).
extern "C" __global__ void __launch_bounds__(kDV / 4) mla_decode_merge(__nv_bfloat16* out, const float* partials)
{
    const int splits = reinterpret_cast<const int*>(partials)[0];
    const long long head = blockIdx.x;
    const int d = threadIdx.x * 4;
    const long long rowsTotal = (long long)gridDim.x * splits;
    const float2* ml = reinterpret_cast<const float2*>(partials + 4 + rowsTotal * kDV) + head * splits;
    float mMax = negInf();
    for (int s = 0; s < splits; ++s)
        mMax = fmaxf(mMax, ml[s].x);
    float sum = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < splits; ++s) {
        const float2 v = ml[s];
        const float weight = v.x == negInf() ? 0.f : exp2f(v.x - mMax); // a split with no tokens
        const float4 a = *reinterpret_cast<const float4*>(partials + 4 + (head * splits + s) * kDV + d);
        sum += weight * v.y;
        o.x += weight * a.x;
        o.y += weight * a.y;
        o.z += weight * a.z;
        o.w += weight * a.w;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + head * kDV + d);
    dst[0] = __floats2bfloat162_rn(o.x * inv, o.y * inv);
    dst[1] = __floats2bfloat162_rn(o.z * inv, o.w * inv);
}
