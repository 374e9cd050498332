// Standalone check and timing of the wgmma MLA decode kernels, dense (bench/attention/mla_hypothesis/
// shared_kv_wgmma.cu) and sparse (kernels/problems/sparse_mla_decode/template_sm90.cu), next to the mma.sync
// kernels (shared_kv.cu, template_mma_sync.cu). The candidate files are #included as the harness
// compiles them (their parameters as defines), each in its own namespace.
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o mla_wgmma_driver driver.cu -lcuda
//   ./mla_wgmma_driver probes|dense|sparse|time-dense|time-sparse
//
// probes: the candidates' own MMA sequences on one warpgroup against fp64 on the host (S = Q K^T from shared memory;
//   O = P V with P from registers and from shared memory, both V halves; the V descriptor with its byte offsets
//   swapped, to name the fix if only that passes) and one page through the dense kernel's tensor map and TMA.
// dense / sparse: the whole kernels on fresh random data (permuted pages, ragged lengths, NaN in page tails past the
//   sequence or in every cache row no list names, -1 padding anywhere, rows with 0, 1, 64 and 65 listed positions,
//   SQ 1 and 2, one split and many, more splits than blocks) against the problem's reference kernel, outputs and
//   workspace poisoned with NaN first. A wrong case prints which sequences, query rows, head halves (CTAs) and column
//   halves (consumer warpgroups) differ and the worst elements. The mma.sync kernels run on the same data.
// time-dense / time-sparse: CUDA events around each launch plan (split kernel + merge where there are splits), new
//   and old interleaved, rotating two input sets, median of the repetitions; TFLOP/s from the visible (dense) or
//   listed (sparse) tokens.
// A barrier wait that spins past 2^20 polls is reported (block, thread, barrier) and abandoned; a kernel that does not
// finish within 20 s ends the process with "HANG".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

struct StallReport {
    unsigned hit, blockX, blockY, thread, barrier, parity;
};
__device__ StallReport gStall;

__device__ void reportStall(unsigned barrier, unsigned parity)
{
    if (atomicCAS(&gStall.hit, 0u, 1u) == 0u) {
        gStall.blockX = blockIdx.x;
        gStall.blockY = blockIdx.y;
        gStall.thread = threadIdx.x;
        gStall.barrier = barrier;
        gStall.parity = parity;
    }
}
#define MLA_STALL_CHECK(spins, bar, parity)                                                                            \
    if ((spins) >= (1u << 20)) {                                                                                       \
        reportStall(bar, parity);                                                                                      \
        break;                                                                                                         \
    }

// The mma.sync kernels' parameters at their defaults; the wgmma kernels have none in device code.
#define BN 64
#define STAGES 2
#define WAVES 1

#include "../../../kernels/problems/mla_decode/reference.cu"
#include "../../../kernels/problems/sparse_mla_decode/reference.cu"

namespace dense_wgmma {
#include "../mla_hypothesis/shared_kv_wgmma.cu"
#include "wgmma_probes.cuh"

// One page through the kernel's tensor map (encoded below as the harness encodes it) and TMA copies, read back
// through the kernel's swizzle.
__global__ void probeTma(const __grid_constant__ TensorMap map, int page, __nv_bfloat16* pageOut)
{
    extern __shared__ unsigned char raw[];
    __shared__ unsigned long long landed;
    const unsigned tile = sharedAddress(alignedShared(raw));
    if (threadIdx.x == 0) {
        mbarInit(&landed, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbarArriveExpectBytes(&landed, kTileBytes);
        for (int box = 0; box < kBoxes; ++box)
            tmaLoadBox(tile + box * kBoxBytes, &map, box * 64, 0, page, &landed);
    }
    mbarWait(&landed, 0);
    for (int i = threadIdx.x; i < 64 * 72; i += blockDim.x) {
        const int r = i / 72, c = i % 72;
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(tile + (c / 8) * kBoxBytes + swizzled(r, c % 8)));
        *reinterpret_cast<uint4*>(pageOut + r * kDK + c * 8) = v;
    }
}
} // namespace dense_wgmma

namespace sparse_wgmma {
#include "../../../kernels/problems/sparse_mla_decode/template_sm90.cu"
#include "wgmma_probes.cuh"
} // namespace sparse_wgmma

namespace dense_mma {
#include "../mla_hypothesis/shared_kv.cu"
}

namespace sparse_mma {
#include "../../../kernels/problems/sparse_mla_decode/template_mma_sync.cu"
}

namespace {

constexpr int kHQ = 128, kDK = 576, kDV = 512, kPS = 64, kTopK = 2048;
constexpr double kRelL2Tolerance = 0.01, kMaxAbsTolerance = 0.02; // the problems' bf16 tolerances
const float kScale = 1.f / std::sqrt(192.f);
int gSmCount = 132;

#define CHECK(x) check((x), #x, __LINE__)
void check(cudaError_t e, const char* what, int line)
{
    if (e != cudaSuccess) {
        std::printf("CUDA ERROR line %d: %s: %s\n", line, what, cudaGetErrorString(e));
        std::fflush(stdout);
        std::exit(2);
    }
}

// Waits for the device with a deadline, then reports (and clears) a barrier wait the kernels abandoned.
bool finish(const std::string& what)
{
    const auto start = std::chrono::steady_clock::now();
    cudaError_t e;
    while ((e = cudaStreamQuery(0)) == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
            std::printf(
                "HANG: %s did not finish within 20 s (a deadlock on a named barrier or mbarrier)\n", what.c_str());
            std::fflush(stdout);
            _exit(3);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (e != cudaSuccess) {
        std::printf("CUDA ERROR in %s: %s\n", what.c_str(), cudaGetErrorString(e));
        std::fflush(stdout);
        std::exit(2);
    }
    StallReport stall;
    CHECK(cudaMemcpyFromSymbol(&stall, gStall, sizeof stall));
    if (!stall.hit)
        return true;
    const unsigned offset = stall.barrier & 1023; // the control block sits at a 1024-byte boundary
    using C = dense_wgmma::Control;
    const unsigned ready = offsetof(C, ready), released = offsetof(C, released);
    char name[48] = "?";
    if (offset == offsetof(C, qReady))
        std::snprintf(name, sizeof name, "qReady");
    else if (offset >= ready && offset < ready + sizeof(C::ready))
        std::snprintf(
            name, sizeof name, "ready[buffer %u][box %u]", (offset - ready) / 8 / 9, (offset - ready) / 8 % 9);
    else if (offset >= released && offset < released + sizeof(C::released))
        std::snprintf(name, sizeof name, "released[buffer %u][%s side]", (offset - released) / 16,
            (offset - released) / 8 % 2 ? "right" : "left");
    std::printf("STALL in %s: block (%u, %u) thread %u (warpgroup %u) waited forever on %s, parity %u\n", what.c_str(),
        stall.blockX, stall.blockY, stall.thread, stall.thread / 128, name, stall.parity);
    const StallReport clear {};
    CHECK(cudaMemcpyToSymbol(gStall, &clear, sizeof clear));
    return false;
}

std::uint64_t mix(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__device__ float uniformAt(std::uint64_t seed, std::uint64_t i)
{
    std::uint64_t x = seed * 0x2545f4914f6cdd1dull + i + 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return static_cast<float>(x >> 40) * (2.f / 16777216.f) - 1.f; // [-1, 1)
}

__global__ void fillUniform(__nv_bfloat16* x, std::size_t n, std::uint64_t seed, float scale)
{
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
        x[i] = __float2bfloat16(uniformAt(seed, i) * scale);
}

// Cache rows [row, row + 1) for each listed row index: random values keyed by the row (a row listed twice gets the
// same).
__global__ void fillRows(__nv_bfloat16* kv, const int* rows, int count, std::uint64_t seed)
{
    for (int r = blockIdx.x; r < count; r += gridDim.x)
        for (int c = threadIdx.x; c < kDK; c += blockDim.x) {
            const std::size_t at = static_cast<std::size_t>(rows[r]) * kDK + c;
            kv[at] = __float2bfloat16(uniformAt(seed, at));
        }
}

__global__ void fillBytes(unsigned char* x, std::size_t n, unsigned char v)
{
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
        x[i] = v;
}

template <typename T> struct DeviceBuffer {
    T* p = nullptr;
    std::size_t n = 0;
    explicit DeviceBuffer(std::size_t count = 0) { resize(count); }
    ~DeviceBuffer()
    {
        if (p)
            cudaFree(p);
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void resize(std::size_t count)
    {
        if (p)
            CHECK(cudaFree(p));
        p = nullptr;
        n = count;
        if (count)
            CHECK(cudaMalloc(&p, count * sizeof(T)));
    }
    void upload(const std::vector<T>& h)
    {
        resize(h.size());
        CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const
    {
        std::vector<T> h(n);
        CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
    std::size_t bytes() const { return n * sizeof(T); }
};

template <typename T> void poison(DeviceBuffer<T>& b) // all-ones bytes: NaN in bf16 and fp32
{
    fillBytes<<<1024, 256>>>(reinterpret_cast<unsigned char*>(b.p), b.bytes(), 0xff);
    CHECK(cudaGetLastError());
}

void fillRandom(DeviceBuffer<__nv_bfloat16>& b, std::uint64_t seed, float scale)
{
    fillUniform<<<2048, 256>>>(b.p, b.n, seed, scale);
    CHECK(cudaGetLastError());
}

std::vector<float> toFloat(const std::vector<__nv_bfloat16>& h)
{
    std::vector<float> f(h.size());
    for (std::size_t i = 0; i < h.size(); ++i)
        f[i] = __bfloat162float(h[i]);
    return f;
}

// The split count the launch lines give: WAVES x min(SM_COUNT, 256) / (B x SQ x 2), at least 1, at most 64 and the
// blocks.
int harnessSplits(int B, int SQ, int blocksMax)
{
    return std::min(std::min(std::max(WAVES * std::min(gSmCount, 256) / (B * SQ * 2), 1), 64), blocksMax);
}

// ---------------------------------------------------------------------------------------------------------------------
// Comparison with the diagnostics a wrong kernel needs: which (sequence, j), head half (CTA), column half (consumer
// warpgroup) and which elements.
struct Verdict {
    bool pass;
    double relL2, maxAbs;
};

Verdict compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref, int B, int SQ)
{
    double num = 0, den = 0, maxAbs = 0;
    std::size_t nonFinite = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const double d = static_cast<double>(got[i]) - ref[i];
        if (!std::isfinite(got[i])) {
            ++nonFinite;
            continue;
        }
        num += d * d;
        den += static_cast<double>(ref[i]) * ref[i];
        maxAbs = std::max(maxAbs, std::fabs(d));
    }
    const double relL2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    const bool pass = nonFinite == 0 && relL2 <= kRelL2Tolerance && maxAbs <= kMaxAbsTolerance;
    std::printf("  %-58s %s  rel_l2 %.3e  max_abs %.3e%s\n", what.c_str(), pass ? "PASS" : "FAIL", relL2, maxAbs,
        nonFinite ? ("  non-finite " + std::to_string(nonFinite)).c_str() : "");
    if (pass)
        return { pass, relL2, maxAbs };
    // Per (b, j, head half, column half): worst error, non-finite count, and the output/reference norm ratio.
    int shown = 0;
    for (int b = 0; b < B && shown < 24; ++b)
        for (int j = 0; j < SQ && shown < 24; ++j)
            for (int hh = 0; hh < 2; ++hh)
                for (int ch = 0; ch < 2; ++ch) {
                    double worst = 0, gn = 0, rn = 0;
                    std::size_t bad = 0, nan = 0;
                    int worstHead = -1, worstCol = -1;
                    for (int h = hh * 64; h < hh * 64 + 64; ++h)
                        for (int c = ch * 256; c < ch * 256 + 256; ++c) {
                            const std::size_t i = ((static_cast<std::size_t>(b) * SQ + j) * kHQ + h) * kDV + c;
                            if (!std::isfinite(got[i])) {
                                ++nan;
                                continue;
                            }
                            const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
                            gn += static_cast<double>(got[i]) * got[i];
                            rn += static_cast<double>(ref[i]) * ref[i];
                            if (d > kMaxAbsTolerance)
                                ++bad;
                            if (d > worst) {
                                worst = d;
                                worstHead = h;
                                worstCol = c;
                            }
                        }
                    if (bad == 0 && nan == 0)
                        continue;
                    ++shown;
                    std::printf("    b %d j %d heads %3d-%3d cols %3d-%3d (consumer wg %d): %zu wrong, %zu non-finite, "
                                "worst %.3g at head %d col %d, |out|/|ref| %.4f\n",
                        b, j, hh * 64, hh * 64 + 63, ch * 256, ch * 256 + 255, ch, bad, nan, worst, worstHead, worstCol,
                        rn > 0 ? std::sqrt(gn / rn) : 0.0);
                }
    std::vector<std::size_t> order(ref.size());
    std::iota(order.begin(), order.end(), 0);
    auto err
        = [&](std::size_t i) { return std::isfinite(got[i]) ? std::fabs(static_cast<double>(got[i]) - ref[i]) : 1e30; };
    std::partial_sort(
        order.begin(), order.begin() + 6, order.end(), [&](std::size_t a, std::size_t b) { return err(a) > err(b); });
    for (int k = 0; k < 6; ++k) {
        const std::size_t i = order[k];
        const int c = static_cast<int>(i % kDV), h = static_cast<int>(i / kDV % kHQ);
        const int j = static_cast<int>(i / kDV / kHQ % SQ), b = static_cast<int>(i / kDV / kHQ / SQ);
        std::printf("    worst: b %d j %d head %d col %d: got %.6g ref %.6g\n", b, j, h, c, got[i], ref[i]);
    }
    return { pass, relL2, maxAbs };
}

bool compareMatrix(
    const std::string& what, const std::vector<float>& got, const std::vector<double>& ref, int rows, int cols)
{
    double num = 0, den = 0, maxAbs = 0;
    int worstR = -1, worstC = -1;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const double g = got[r * cols + c], e = ref[r * cols + c];
            const double d = std::isfinite(g) ? std::fabs(g - e) : 1e30;
            num += d * d;
            den += e * e;
            if (d > maxAbs) {
                maxAbs = d;
                worstR = r;
                worstC = c;
            }
        }
    const double relL2 = std::sqrt(num / den);
    const bool pass = relL2 < 1e-4;
    std::printf("  %-58s %s  rel_l2 %.3e  max_abs %.3e", what.c_str(), pass ? "PASS" : "FAIL", relL2, maxAbs);
    if (!pass) {
        std::printf("  worst at row %d col %d: got %.6g want %.6g", worstR, worstC, got[worstR * cols + worstC],
            ref[worstR * cols + worstC]);
        // Rows or columns where the error sits tell a wrong fragment layout from a wrong descriptor.
        int badRows = 0, badCols = 0;
        for (int r = 0; r < rows; ++r) {
            bool bad = false;
            for (int c = 0; c < cols; ++c)
                bad |= std::fabs(got[r * cols + c] - ref[r * cols + c]) > 1e-3 * (1 + std::fabs(ref[r * cols + c]));
            badRows += bad;
        }
        for (int c = 0; c < cols; ++c) {
            bool bad = false;
            for (int r = 0; r < rows; ++r)
                bad |= std::fabs(got[r * cols + c] - ref[r * cols + c]) > 1e-3 * (1 + std::fabs(ref[r * cols + c]));
            badCols += bad;
        }
        std::printf("; %d of %d rows and %d of %d columns differ", badRows, rows, badCols, cols);
    }
    std::printf("\n");
    return pass;
}

// ---------------------------------------------------------------------------------------------------------------------
// Probes

CUtensorMap encodeKvMap(const __nv_bfloat16* kv, std::size_t pages)
{
    // As the harness encodes `tensormap tmKV tensor=kv_cache box=(64, PS, 1) swizzle=128B l2promo=256B oob=zero`.
    CUtensorMap map;
    const cuuint64_t dims[3] = { kDK, kPS, pages };
    const cuuint64_t strides[2] = { kDK * 2, static_cast<cuuint64_t>(kPS) * kDK * 2 };
    const cuuint32_t box[3] = { 64, kPS, 1 }, elementStrides[3] = { 1, 1, 1 };
    const CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<__nv_bfloat16*>(kv),
        dims, strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        std::printf("cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
        std::exit(2);
    }
    return map;
}

template <typename Map> Map asKernelMap(const CUtensorMap& m)
{
    static_assert(sizeof(Map) == sizeof(CUtensorMap));
    Map k;
    std::memcpy(&k, &m, sizeof m);
    return k;
}

constexpr int kProbeSmem = 1024 + 2 * 73728;

template <typename ProbeScores, typename ProbeValues>
int runProbes(const char* name, ProbeScores probeScores, ProbeValues probeValues)
{
    int failures = 0;
    DeviceBuffer<__nv_bfloat16> q(64 * kDK), k(64 * kDK);
    fillRandom(q, 11, 1.f);
    fillRandom(k, 12, 1.f);
    DeviceBuffer<float> s(64 * 64), o(64 * 256);
    CHECK(cudaFuncSetAttribute(probeScores, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem));
    CHECK(cudaFuncSetAttribute(probeValues, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem));
    poison(s);
    probeScores<<<1, 128, kProbeSmem>>>(q.p, k.p, s.p);
    finish(std::string(name) + " probeScores");
    const std::vector<float> qh = toFloat(q.download()), kh = toFloat(k.download());
    std::vector<double> sRef(64 * 64);
    for (int r = 0; r < 64; ++r)
        for (int c = 0; c < 64; ++c) {
            double acc = 0;
            for (int d = 0; d < kDK; ++d)
                acc += static_cast<double>(qh[r * kDK + d]) * kh[c * kDK + d];
            sRef[r * 64 + c] = acc;
        }
    failures
        += !compareMatrix(std::string(name) + " S = Q K^T (issueScores, K-major SW128)", s.download(), sRef, 64, 64);

    // P: bf16-exact values in [0, 1).
    std::vector<float> ph(64 * 64);
    std::mt19937 rng(5);
    for (auto& x : ph)
        x = __bfloat162float(__float2bfloat16(std::uniform_real_distribution<float>(0.f, 1.f)(rng)));
    DeviceBuffer<float> pd;
    pd.upload(ph);
    for (int variant = 0; variant < 2; ++variant)
        for (int fromShared = 0; fromShared < 2; ++fromShared)
            for (int side = 0; side < 2; ++side) {
                if (variant && !fromShared)
                    continue;
                poison(o);
                probeValues<<<1, 128, kProbeSmem>>>(pd.p, k.p, side, fromShared, variant, o.p);
                finish(std::string(name) + " probeValues");
                std::vector<double> oRef(64 * 256);
                for (int r = 0; r < 64; ++r)
                    for (int c = 0; c < 256; ++c) {
                        double acc = 0;
                        for (int t = 0; t < 64; ++t)
                            acc += static_cast<double>(ph[r * 64 + t]) * kh[t * kDK + side * 256 + c];
                        oRef[r * 256 + c] = acc;
                    }
                const std::string label = std::string(name) + " O = P V, P from "
                    + (fromShared ? "shared" : "registers") + ", V cols " + (side ? "256-511" : "0-255")
                    + (variant ? " [LBO/SBO SWAPPED]" : "");
                const bool ok = compareMatrix(label, o.download(), oRef, 64, 256);
                if (!variant)
                    failures += !ok;
                else if (ok)
                    std::printf("  NOTE: the swapped V descriptor (leading 1024, stride 8192) is the one that works\n");
            }
    return failures;
}

int probes()
{
    std::printf("== probes: the candidates' MMA sequences on one warpgroup vs fp64\n");
    int failures = runProbes("dense ", dense_wgmma::probeScores, dense_wgmma::probeValues);
    failures += runProbes("sparse", sparse_wgmma::probeScores, sparse_wgmma::probeValues);

    // One page through the tensor map and TMA.
    const int pages = 5, page = 3;
    DeviceBuffer<__nv_bfloat16> kv(static_cast<std::size_t>(pages) * kPS * kDK), back(kPS * kDK);
    fillRandom(kv, 21, 1.f);
    poison(back);
    const auto map = asKernelMap<dense_wgmma::TensorMap>(encodeKvMap(kv.p, pages));
    CHECK(cudaFuncSetAttribute(dense_wgmma::probeTma, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem));
    dense_wgmma::probeTma<<<1, 128, kProbeSmem>>>(map, page, back.p);
    finish("probeTma");
    const auto all = kv.download(), got = back.download();
    std::size_t wrong = 0;
    for (int i = 0; i < kPS * kDK; ++i)
        wrong += std::memcmp(&got[i], &all[static_cast<std::size_t>(page) * kPS * kDK + i], 2) != 0;
    std::printf("  %-58s %s  %zu of %d elements differ\n", "dense  page via tensor map + TMA, read through the swizzle",
        wrong ? "FAIL" : "PASS", wrong, kPS * kDK);
    failures += wrong != 0;
    std::printf("probes: %s\n", failures ? "FAILURES" : "all pass");
    return failures;
}

// ---------------------------------------------------------------------------------------------------------------------
// Dense

struct DenseInputs {
    int B, SQ, MAXP;
    DeviceBuffer<__nv_bfloat16> q, kv;
    DeviceBuffer<int> blockTable, seqLens;
    std::vector<int> lens;
    double flops = 0; // from the visible tokens
};

// Ragged lengths in the problem's range ((MAXP - 1) * PS + SQ .. MAXP * PS) unless full; pages permuted; page tails
// past each sequence NaN when nanTails.
void makeDense(DenseInputs& in, int B, int SQ, int MAXP, std::uint64_t seed, float qScale, bool full, bool nanTails)
{
    in.B = B;
    in.SQ = SQ;
    in.MAXP = MAXP;
    std::mt19937_64 rng(seed);
    in.q.resize(static_cast<std::size_t>(B) * SQ * kHQ * kDK);
    fillRandom(in.q, mix(seed + 1), qScale);
    in.kv.resize(static_cast<std::size_t>(B) * MAXP * kPS * kDK);
    fillRandom(in.kv, mix(seed + 2), 1.f);
    std::vector<int> table(static_cast<std::size_t>(B) * MAXP);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    in.blockTable.upload(table);
    in.lens.resize(B);
    in.flops = 0;
    for (int b = 0; b < B; ++b) {
        const int low = (MAXP - 1) * kPS + SQ, high = MAXP * kPS;
        in.lens[b] = full ? high : low + static_cast<int>(rng() % (high - low + 1));
        for (int j = 0; j < SQ; ++j)
            in.flops += 2.0 * kHQ * (in.lens[b] - SQ + 1 + j) * (kDK + kDV);
    }
    in.seqLens.upload(in.lens);
    if (nanTails) {
        std::vector<__nv_bfloat16> nanRow(kDK, __ushort_as_bfloat16(0x7fc0));
        for (int b = 0; b < B; ++b)
            for (int t = in.lens[b]; t < MAXP * kPS; ++t) {
                const std::size_t row
                    = static_cast<std::size_t>(table[static_cast<std::size_t>(b) * MAXP + t / kPS]) * kPS + t % kPS;
                CHECK(cudaMemcpy(in.kv.p + row * kDK, nanRow.data(), kDK * 2, cudaMemcpyHostToDevice));
            }
    }
}

// The launch plans (split kernel, then the merge where there are splits); grids from the launch lines.
struct Plan {
    std::function<void()> launch;
    std::string name;
};

Plan denseWgmma(DenseInputs& in, DeviceBuffer<__nv_bfloat16>& out, DeviceBuffer<float>& partials, int splits,
    const CUtensorMap& map)
{
    const auto kmap = asKernelMap<dense_wgmma::TensorMap>(map);
    const int rowBlocks = in.B * in.SQ * 2;
    return { [&in, &out, &partials, splits, kmap, rowBlocks]() {
                dense_wgmma::mla_decode_wgmma<<<dim3(rowBlocks, splits), 384, 1024 + 3 * 73728 + 1024>>>(
                    kmap, partials.p, out.p, in.q.p, in.blockTable.p, in.seqLens.p, in.SQ, in.MAXP, kScale);
                if (splits > 1)
                    dense_wgmma::mla_decode_wgmma_merge<<<in.B * in.SQ * kHQ, 128>>>(out.p, partials.p);
            },
        "wgmma" };
}

Plan denseMma(DenseInputs& in, DeviceBuffer<__nv_bfloat16>& out, DeviceBuffer<float>& partials, int splits)
{
    const int rowBlocks = in.B * in.SQ * 2;
    return { [&in, &out, &partials, splits, rowBlocks]() {
                dense_mma::mla_decode_split<<<dim3(rowBlocks, splits), 256, 64 * kDK * 2 + 2 * 64 * kDK * 2 + 1536>>>(
                    partials.p, out.p, in.q.p, in.kv.p, in.blockTable.p, in.seqLens.p, in.SQ, in.MAXP, kScale);
                if (splits > 1)
                    dense_mma::mla_decode_merge<<<in.B * in.SQ * kHQ, 128>>>(out.p, partials.p);
            },
        "mma.sync" };
}

std::size_t partialFloats(int B, int SQ, int splits)
{
    return 4 + static_cast<std::size_t>(B) * SQ * kHQ * splits * (kDV + 2);
}

void setSharedLimits()
{
    CHECK(cudaFuncSetAttribute(
        dense_wgmma::mla_decode_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024 + 3 * 73728 + 1024));
    CHECK(cudaFuncSetAttribute(sparse_wgmma::sparse_mla_decode_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize,
        1024 + 3 * 73728 + 1024 + kTopK * 4));
    CHECK(cudaFuncSetAttribute(dense_mma::mla_decode_split, cudaFuncAttributeMaxDynamicSharedMemorySize,
        64 * kDK * 2 + 2 * 64 * kDK * 2 + 1536));
    CHECK(cudaFuncSetAttribute(sparse_mma::sparse_mla_decode_split, cudaFuncAttributeMaxDynamicSharedMemorySize,
        64 * kDK * 2 + 2 * 64 * kDK * 2 + 1536 + kTopK * 4));
}

// Runs a plan on poisoned outputs and compares it with the reference.
bool checkPlan(const std::string& label, Plan plan, DeviceBuffer<__nv_bfloat16>& out, DeviceBuffer<float>& partials,
    const std::vector<float>& ref, int B, int SQ)
{
    poison(out);
    poison(partials);
    plan.launch();
    CHECK(cudaGetLastError());
    const bool clean = finish(label);
    const Verdict v = compare(label, toFloat(out.download()), ref, B, SQ);
    return v.pass && clean;
}

struct DenseCase {
    int B, SQ, MAXP;
    int splits; // 0: the launch line's count
    float qScale;
    bool full, nanTails;
    const char* note;
};

int dense()
{
    std::printf("== dense: mla_decode_wgmma (shared_kv_wgmma.cu) and mla_decode_split (shared_kv.cu) vs reference\n");
    setSharedLimits();
    const DenseCase cases[] = {
        { 1, 1, 1, 0, 1.f, false, true, "one partial page" },
        { 3, 2, 3, 0, 1.f, false, true, "verify shape, odd page count" },
        { 2, 2, 17, 0, 1.f, false, true, "verify shape, harness splits" },
        { 2, 1, 17, 5, 1.f, false, false, "5 splits of 4 pages" },
        { 4, 2, 9, 16, 1.f, false, true, "16 splits of 9 pages: empty splits" },
        { 3, 1, 33, 1, 4.f, false, true, "one split, 33 pages, large logits" },
        { 2, 2, 64, 0, 0.001f, false, false, "tiny q" },
        { 8, 2, 40, 0, 1.f, true, false, "full last pages" },
        { 1, 1, 1024, 0, 1.f, false, true, "tuning shape B=1 MAXP=1024" },
        { 64, 1, 128, 0, 1.f, false, false, "tuning shape B=64 MAXP=128" },
        { 64, 2, 64, 0, 1.f, false, true, "B=64 SQ=2" },
    };
    int failures = 0;
    std::uint64_t seed = 100;
    for (const DenseCase& c : cases) {
        DenseInputs in;
        makeDense(in, c.B, c.SQ, c.MAXP, ++seed, c.qScale, c.full, c.nanTails);
        const int splits = c.splits ? c.splits : harnessSplits(c.B, c.SQ, c.MAXP);
        DeviceBuffer<__nv_bfloat16> out(static_cast<std::size_t>(c.B) * c.SQ * kHQ * kDV), refOut(out.n);
        DeviceBuffer<float> partials(partialFloats(c.B, c.SQ, splits));
        poison(refOut);
        mla_decode_reference<<<dim3(c.B * c.SQ, kHQ), 64>>>(
            refOut.p, in.q.p, in.kv.p, in.blockTable.p, in.seqLens.p, c.SQ, c.MAXP, kScale);
        finish("mla_decode_reference");
        const std::vector<float> ref = toFloat(refOut.download());
        char label[160];
        std::printf(" B=%d SQ=%d MAXP=%d splits=%d q*%g%s: %s\n", c.B, c.SQ, c.MAXP, splits, c.qScale,
            c.nanTails ? " NaN tails" : "", c.note);
        const CUtensorMap map = encodeKvMap(in.kv.p, static_cast<std::size_t>(c.B) * c.MAXP);
        std::snprintf(label, sizeof label, "wgmma");
        failures += !checkPlan(label, denseWgmma(in, out, partials, splits, map), out, partials, ref, c.B, c.SQ);
        std::snprintf(label, sizeof label, "mma.sync (known good)");
        failures += !checkPlan(label, denseMma(in, out, partials, splits), out, partials, ref, c.B, c.SQ);
    }
    std::printf("dense: %s\n", failures ? "FAILURES" : "all pass");
    return failures;
}

// ---------------------------------------------------------------------------------------------------------------------
// Sparse

struct SparseInputs {
    int B, SQ, MAXP;
    DeviceBuffer<__nv_bfloat16> q, kv;
    DeviceBuffer<int> blockTable, indices;
    double flops = 0; // from the listed rows
};

// Lists of distinct positions < MAXP * PS with a `pad` fraction of -1 slots anywhere; when `special`, list 0 is empty
// and lists 1, 2, 3 hold exactly 1, 64 and 65 positions. With nanUnlisted every cache row no list names is NaN.
void makeSparse(
    SparseInputs& in, int B, int SQ, int MAXP, std::uint64_t seed, float pad, bool special, bool nanUnlisted)
{
    in.B = B;
    in.SQ = SQ;
    in.MAXP = MAXP;
    std::mt19937_64 rng(seed);
    in.q.resize(static_cast<std::size_t>(B) * SQ * kHQ * kDK);
    fillRandom(in.q, mix(seed + 1), 1.f);
    const std::size_t rows = static_cast<std::size_t>(B) * MAXP * kPS;
    in.kv.resize(rows * kDK);
    std::vector<int> table(static_cast<std::size_t>(B) * MAXP);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    in.blockTable.upload(table);
    std::vector<int> lists(static_cast<std::size_t>(B) * SQ * kTopK, -1), listedRows;
    std::vector<int> positions(static_cast<std::size_t>(MAXP) * kPS);
    in.flops = 0;
    for (int l = 0; l < B * SQ; ++l) {
        const int b = l / SQ;
        std::iota(positions.begin(), positions.end(), 0);
        std::shuffle(positions.begin(), positions.end(), rng);
        int want = std::min<int>(kTopK, MAXP * kPS);
        want = static_cast<int>(want * (1.0 - pad));
        if (special && l < 4)
            want = std::min(std::min(MAXP * kPS, kTopK), l == 0 ? 0 : l == 1 ? 1 : l == 2 ? 64 : 65);
        std::vector<int> slots(kTopK);
        std::iota(slots.begin(), slots.end(), 0);
        std::shuffle(slots.begin(), slots.end(), rng);
        for (int i = 0; i < want; ++i) {
            lists[static_cast<std::size_t>(l) * kTopK + slots[i]] = positions[i];
            listedRows.push_back(
                table[static_cast<std::size_t>(b) * MAXP + positions[i] / kPS] * kPS + positions[i] % kPS);
        }
        in.flops += 2.0 * kHQ * want * (kDK + kDV);
    }
    in.indices.upload(lists);
    if (nanUnlisted) {
        poison(in.kv);
        DeviceBuffer<int> rowsDev;
        rowsDev.upload(listedRows);
        fillRows<<<4096, 128>>>(in.kv.p, rowsDev.p, static_cast<int>(listedRows.size()), mix(seed + 2));
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
    } else {
        fillRandom(in.kv, mix(seed + 2), 1.f);
    }
}

Plan sparseWgmma(SparseInputs& in, DeviceBuffer<__nv_bfloat16>& out, DeviceBuffer<float>& partials, int splits)
{
    const int rowBlocks = in.B * in.SQ * 2;
    return { [&in, &out, &partials, splits, rowBlocks]() {
                sparse_wgmma::
                    sparse_mla_decode_wgmma<<<dim3(rowBlocks, splits), 384, 1024 + 3 * 73728 + 1024 + kTopK * 4>>>(
                        partials.p, out.p, in.q.p, in.kv.p, in.blockTable.p, in.indices.p, in.SQ, in.MAXP, kScale);
                if (splits > 1)
                    sparse_wgmma::sparse_mla_decode_wgmma_merge<<<in.B * in.SQ * kHQ, 128>>>(out.p, partials.p);
            },
        "wgmma" };
}

Plan sparseMma(SparseInputs& in, DeviceBuffer<__nv_bfloat16>& out, DeviceBuffer<float>& partials, int splits)
{
    const int rowBlocks = in.B * in.SQ * 2;
    return { [&in, &out, &partials, splits, rowBlocks]() {
                sparse_mma::sparse_mla_decode_split<<<dim3(rowBlocks, splits), 256,
                    64 * kDK * 2 + 2 * 64 * kDK * 2 + 1536 + kTopK * 4>>>(
                    partials.p, out.p, in.q.p, in.kv.p, in.blockTable.p, in.indices.p, in.SQ, in.MAXP, kScale);
                if (splits > 1)
                    sparse_mma::sparse_mla_decode_merge<<<in.B * in.SQ * kHQ, 128>>>(out.p, partials.p);
            },
        "mma.sync" };
}

struct SparseCase {
    int B, SQ, MAXP;
    int splits;
    float pad;
    bool special, nanUnlisted;
    const char* note;
};

int sparse()
{
    std::printf("== sparse: sparse_mla_decode_wgmma (template_sm90.cu) and the mma.sync template vs reference\n");
    setSharedLimits();
    const SparseCase cases[] = {
        { 1, 1, 1, 0, 0.f, false, true, "one page: 64 positions listed" },
        { 3, 2, 3, 0, 0.25f, false, true, "verify shape" },
        { 2, 2, 33, 0, 0.25f, true, true, "verify shape, lists of 0, 1, 64, 65" },
        { 2, 1, 512, 0, 0.25f, true, true, "verify shape MAXP=512" },
        { 4, 2, 64, 3, 0.f, false, false, "full lists, 3 splits" },
        { 3, 1, 100, 40, 0.5f, true, true, "40 splits: empty ones" },
        { 5, 2, 64, 1, 0.9f, true, true, "one split, sparse lists" },
        { 64, 1, 128, 0, 0.25f, false, false, "tuning shape B=64" },
        { 128, 2, 64, 0, 0.25f, true, false, "tuning shape B=128 SQ=2" },
    };
    int failures = 0;
    std::uint64_t seed = 200;
    for (const SparseCase& c : cases) {
        SparseInputs in;
        makeSparse(in, c.B, c.SQ, c.MAXP, ++seed, c.pad, c.special, c.nanUnlisted);
        const int splits = c.splits ? c.splits : harnessSplits(c.B, c.SQ, (std::min(kTopK, c.MAXP * kPS) + 63) / 64);
        DeviceBuffer<__nv_bfloat16> out(static_cast<std::size_t>(c.B) * c.SQ * kHQ * kDV), refOut(out.n);
        DeviceBuffer<float> partials(partialFloats(c.B, c.SQ, splits));
        poison(refOut);
        sparse_mla_decode_reference<<<dim3(c.B * c.SQ, kHQ), 64>>>(
            refOut.p, in.q.p, in.kv.p, in.blockTable.p, in.indices.p, c.SQ, c.MAXP, kScale);
        finish("sparse_mla_decode_reference");
        const std::vector<float> ref = toFloat(refOut.download());
        std::printf(" B=%d SQ=%d MAXP=%d splits=%d pad %.2f%s%s: %s\n", c.B, c.SQ, c.MAXP, splits, c.pad,
            c.special ? " special lists" : "", c.nanUnlisted ? " NaN unlisted rows" : "", c.note);
        failures += !checkPlan("wgmma", sparseWgmma(in, out, partials, splits), out, partials, ref, c.B, c.SQ);
        failures
            += !checkPlan("mma.sync (known good)", sparseMma(in, out, partials, splits), out, partials, ref, c.B, c.SQ);
    }
    std::printf("sparse: %s\n", failures ? "FAILURES" : "all pass");
    return failures;
}

// ---------------------------------------------------------------------------------------------------------------------
// Timing

double medianOf(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Each plan's median time (ms) over `reps`, the plans interleaved and each launch on the next input set.
std::vector<double> timePlans(const std::vector<std::vector<Plan>>& plansBySet, int reps)
{
    const std::size_t kinds = plansBySet[0].size();
    std::vector<std::vector<float>> times(kinds);
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    for (int r = -2; r < reps; ++r) // two warm-up rounds
        for (std::size_t k = 0; k < kinds; ++k) {
            const Plan& p = plansBySet[(r + 2) % plansBySet.size()][k];
            CHECK(cudaEventRecord(start));
            p.launch();
            CHECK(cudaEventRecord(stop));
            CHECK(cudaGetLastError());
            finish("timing " + p.name);
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, start, stop));
            if (r >= 0)
                times[k].push_back(ms);
        }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    std::vector<double> medians;
    for (auto& t : times)
        medians.push_back(medianOf(t));
    return medians;
}

int timeDense()
{
    std::printf("== time-dense: median of 10, two input sets, full-length sequences\n");
    setSharedLimits();
    struct Shape {
        int B, SQ, ctx;
    };
    const Shape shapes[] = { { 64, 1, 8192 }, { 128, 1, 8192 }, { 128, 1, 16384 }, { 64, 2, 32768 }, { 128, 1, 32768 },
        { 1, 1, 65536 } };
    std::printf("| kernel | B | SQ | ctx | splits | us | TFLOP/s | vs mma.sync |\n|---|---|---|---|---|---|---|---|\n");
    bool verified = false;
    for (const Shape& s : shapes) {
        const int MAXP = s.ctx / kPS, splits = harnessSplits(s.B, s.SQ, MAXP);
        DenseInputs a, b;
        makeDense(a, s.B, s.SQ, MAXP, 300 + s.B + s.ctx, 1.f, true, false);
        // The second set: the same cache, another page order and another q.
        b.B = s.B;
        b.SQ = s.SQ;
        b.MAXP = MAXP;
        b.flops = a.flops;
        b.q.resize(a.q.n);
        fillRandom(b.q, 77, 1.f);
        std::vector<int> table(static_cast<std::size_t>(s.B) * MAXP);
        std::iota(table.begin(), table.end(), 0);
        std::shuffle(table.begin(), table.end(), std::mt19937_64(s.ctx));
        b.blockTable.upload(table);
        b.seqLens.upload(a.lens);
        b.kv.p = a.kv.p; // borrowed
        DeviceBuffer<__nv_bfloat16> out(static_cast<std::size_t>(s.B) * s.SQ * kHQ * kDV);
        DeviceBuffer<float> partials(partialFloats(s.B, s.SQ, splits));
        const CUtensorMap map = encodeKvMap(a.kv.p, static_cast<std::size_t>(s.B) * MAXP);
        if (!verified) { // the first shape checked against the reference too
            DeviceBuffer<__nv_bfloat16> refOut(out.n);
            mla_decode_reference<<<dim3(s.B * s.SQ, kHQ), 64>>>(
                refOut.p, a.q.p, a.kv.p, a.blockTable.p, a.seqLens.p, s.SQ, MAXP, kScale);
            finish("mla_decode_reference");
            checkPlan("wgmma at the first timed shape", denseWgmma(a, out, partials, splits, map), out, partials,
                toFloat(refOut.download()), s.B, s.SQ);
            verified = true;
        }
        const std::vector<std::vector<Plan>> plans = {
            { denseWgmma(a, out, partials, splits, map), denseMma(a, out, partials, splits) },
            { denseWgmma(b, out, partials, splits, map), denseMma(b, out, partials, splits) },
        };
        const auto ms = timePlans(plans, 10);
        for (std::size_t k = 0; k < ms.size(); ++k)
            std::printf("| dense %s | %d | %d | %d | %d | %.1f | %.1f | %.2fx |\n", plans[0][k].name.c_str(), s.B, s.SQ,
                s.ctx, splits, ms[k] * 1e3, a.flops / (ms[k] * 1e-3) / 1e12, ms[1] / ms[k]);
        std::fflush(stdout);
        b.kv.p = nullptr;
    }
    return 0;
}

int timeSparse()
{
    std::printf("== time-sparse: top-k 2048 (no padding), MAXP 128, median of 10, two input sets\n");
    setSharedLimits();
    struct Shape {
        int B, SQ;
    };
    const Shape shapes[] = { { 64, 1 }, { 128, 1 }, { 64, 2 }, { 128, 2 } };
    std::printf("| kernel | B | SQ | k | splits | us | TFLOP/s | vs mma.sync |\n|---|---|---|---|---|---|---|---|\n");
    bool verified = false;
    for (const Shape& s : shapes) {
        const int MAXP = 128, splits = harnessSplits(s.B, s.SQ, kTopK / 64);
        SparseInputs a, b;
        makeSparse(a, s.B, s.SQ, MAXP, 400 + s.B * s.SQ, 0.f, false, false);
        makeSparse(b, s.B, s.SQ, MAXP, 500 + s.B * s.SQ, 0.f, false, false);
        DeviceBuffer<__nv_bfloat16> out(static_cast<std::size_t>(s.B) * s.SQ * kHQ * kDV);
        DeviceBuffer<float> partials(partialFloats(s.B, s.SQ, splits));
        if (!verified) {
            DeviceBuffer<__nv_bfloat16> refOut(out.n);
            sparse_mla_decode_reference<<<dim3(s.B * s.SQ, kHQ), 64>>>(
                refOut.p, a.q.p, a.kv.p, a.blockTable.p, a.indices.p, s.SQ, MAXP, kScale);
            finish("sparse_mla_decode_reference");
            checkPlan("wgmma at the first timed shape", sparseWgmma(a, out, partials, splits), out, partials,
                toFloat(refOut.download()), s.B, s.SQ);
            verified = true;
        }
        const std::vector<std::vector<Plan>> plans = {
            { sparseWgmma(a, out, partials, splits), sparseMma(a, out, partials, splits) },
            { sparseWgmma(b, out, partials, splits), sparseMma(b, out, partials, splits) },
        };
        const auto ms = timePlans(plans, 10);
        for (std::size_t k = 0; k < ms.size(); ++k)
            std::printf("| sparse %s | %d | %d | %d | %d | %.1f | %.1f | %.2fx |\n", plans[0][k].name.c_str(), s.B,
                s.SQ, kTopK, splits, ms[k] * 1e3, a.flops / (ms[k] * 1e-3) / 1e12, ms[1] / ms[k]);
        std::fflush(stdout);
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    const std::string mode = argc > 1 ? argv[1] : "";
    CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    gSmCount = prop.multiProcessorCount;
    std::printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, gSmCount);
    CHECK(cudaFree(nullptr));
    int failures;
    if (mode == "probes")
        failures = probes();
    else if (mode == "dense")
        failures = dense();
    else if (mode == "sparse")
        failures = sparse();
    else if (mode == "time-dense")
        failures = timeDense();
    else if (mode == "time-sparse")
        failures = timeSparse();
    else {
        std::printf("usage: %s probes|dense|sparse|time-dense|time-sparse\n", argv[0]);
        return 64;
    }
    std::fflush(stdout);
    return failures ? 1 : 0;
}
