// Probe kernels over one candidate's own MMA functions (included right after the candidate, inside its namespace):
// one warpgroup stages operands with plain stores in the candidate's swizzle, runs exactly the candidate's wgmma
// sequence and writes the accumulators out in matrix order, so the host can tell which descriptor or fragment layout is
// wrong when the whole kernel is.

// Tile t (64 rows x 576, row-major) into shared memory as the candidate's 9 swizzled boxes.
__device__ inline void stageTile(unsigned dst, const __nv_bfloat16* tile)
{
    for (int i = threadIdx.x; i < 64 * 72; i += blockDim.x) {
        const int r = i / 72, c = i % 72; // 16-byte chunk c of row r: box c / 8, chunk c % 8
        const uint4 v = *reinterpret_cast<const uint4*>(tile + r * kDK + c * 8);
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst + (c / 8) * kBoxBytes + swizzled(r, c % 8)),
                     "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
    }
    fenceAsyncShared();
    __syncthreads();
}

// Accumulator element i of this thread: its row and column.
__device__ inline int accumulatorRow(int i)
{
    const int t = threadIdx.x % 128;
    return t / 32 * 16 + t % 32 / 4 + 8 * ((i >> 1) & 1);
}

__device__ inline int accumulatorColumn(int i)
{
    return (i >> 2) * 8 + threadIdx.x % 4 * 2 + (i & 1);
}

// S = Q K^T (64 x 64) through issueScores (issueScoresBox over the 9 boxes).
__global__ void __launch_bounds__(128) probeScores(const __nv_bfloat16* q, const __nv_bfloat16* k, float* sOut)
{
    extern __shared__ unsigned char raw[];
    const unsigned qs = sharedAddress(alignedShared(raw)), ks = qs + kTileBytes;
    stageTile(qs, q);
    stageTile(ks, k);
    float s[32];
    issueScores(s, qs, ks);
    wgmmaWait<0>();
    pinRegisters(s);
    for (int i = 0; i < 32; ++i)
        sOut[accumulatorRow(i) * 64 + accumulatorColumn(i)] = s[i];
}

// O = P V (64 x 256) over V's columns 256 side .. + 255 of a 64-token tile: P (64 x 64, bf16-exact values) packed as
// the kernel packs it from S's accumulator layout, then either from registers or stored into the rope box.
// vDescriptorVariant != 0 bypasses the candidate's V descriptor: leading/stride byte offsets swapped (diagnostic).
__global__ void __launch_bounds__(128) probeValues(
    const float* pIn, const __nv_bfloat16* kv, int side, int fromShared, int vDescriptorVariant, float* oOut)
{
    extern __shared__ unsigned char raw[];
    const unsigned tile = sharedAddress(alignedShared(raw));
    stageTile(tile, kv);
    float s[32], o[128];
    for (int i = 0; i < 32; ++i)
        s[i] = pIn[accumulatorRow(i) * 64 + accumulatorColumn(i)];
    for (int i = 0; i < 128; ++i)
        o[i] = 0.f;
    unsigned p[4][4];
    const float one[2] = { 1.f, 1.f };
    packP(p, s, one);
    const unsigned v = tile + side * kLeftBoxes * kBoxBytes, pBox = tile + kRopeBox * kBoxBytes;
    if (vDescriptorVariant != 0) {
        storeP(pBox, p);
        fenceAsyncShared();
        __syncthreads();
        const unsigned long long vd = matrixDescriptor(v, 1024, kBoxBytes), pd = kMajorDescriptor(pBox);
        wgmmaFence();
        for (int k = 0; k < 4; ++k)
            wgmmaValuesFromShared(o, pd + ((k * 32) >> 4), vd + ((k * 2048) >> 4));
        wgmmaCommit();
    } else if (fromShared) {
        storeP(pBox, p);
        fenceAsyncShared();
        __syncthreads();
        issueValuesFromShared(o, pBox, v);
    } else {
        issueValuesFromRegisters(o, p, v);
    }
    wgmmaWait<0>();
    pinRegisters(o);
    pinRegisters(p);
    for (int i = 0; i < 128; ++i)
        oOut[accumulatorRow(i) * kHalfV + accumulatorColumn(i)] = o[i];
}
