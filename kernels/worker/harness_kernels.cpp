#include "kernels/worker/harness_kernels.h"

#include "kernels/worker/cuda_check.h"

#include <algorithm>

namespace kl::worker {

const char* distributionName(Distribution d)
{
    switch (d) {
    case Distribution::Normal:
        return "normal";
    case Distribution::Large:
        return "large";
    case Distribution::Outliers:
        return "outliers";
    }
    return "?";
}

HarnessKernels::~HarnessKernels()
{
    unload();
}

void HarnessKernels::unload()
{
    if (m_module)
        cuModuleUnload(m_module);
    m_module = nullptr;
}

void HarnessKernels::load(NvrtcCompiler& compiler, const std::string& arch)
{
    CompileJob job;
    job.source = harnessKernelSource();
    job.arch = arch;
    job.name = "kl_harness.cu";
    job.kernels = harnessKernelNames();
    auto m = compiler.compile(job);
    if (!m->report.ok)
        throw std::runtime_error("harness kernels failed to compile: " + m->report.log);
    KL_CU(cuModuleLoadData(&m_module, m->cubin.data()));
    KL_CU(cuModuleGetFunction(&m_fill, m_module, "kl_h_fill"));
    KL_CU(cuModuleGetFunction(&m_poison, m_module, "kl_h_poison"));
    KL_CU(cuModuleGetFunction(&m_compare, m_module, "kl_h_compare"));
    KL_CU(cuModuleGetFunction(&m_hash, m_module, "kl_h_hash"));
    KL_CU(cuModuleGetFunction(&m_copy, m_module, "kl_h_copy"));
    KL_CU(cuModuleGetFunction(&m_spin, m_module, "kl_h_spin"));
    KL_CU(cuModuleGetFunction(&m_sumSquares, m_module, "kl_h_sum_squares"));
    KL_CU(cuModuleGetFunction(&m_comparePairs, m_module, "kl_h_compare_pairs"));
    KL_CU(cuModuleGetFunction(&m_slabCanaryFill, m_module, "kl_h_slab_canary_fill"));
    KL_CU(cuModuleGetFunction(&m_slabCanaryCheck, m_module, "kl_h_slab_canary_check"));
    KL_CU(cuModuleGetFunction(&m_slabPoison, m_module, "kl_h_slab_poison"));
    KL_CU(cuModuleGetFunction(&m_slabFill, m_module, "kl_h_slab_fill"));
    KL_CU(cuModuleGetFunction(&m_copyPairs, m_module, "kl_h_copy_pairs"));
    CUdevice dev;
    KL_CU(cuCtxGetDevice(&dev));
    KL_CU(cuDeviceGetAttribute(&m_smCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
}

std::uint64_t HarnessKernels::vectorLanes(std::uint64_t n, DType dt)
{
    // The kernels move 16 bytes per thread and iteration: size the grid by 16-byte chunks, not elements.
    const std::uint64_t per = std::max<std::uint64_t>(1, 16 / dtypeBytes(dt));
    return (n + per - 1) / per;
}

void HarnessKernels::launch(CUfunction f, CUstream s, std::uint64_t n, void** args) const
{
    const unsigned block = 256;
    const std::uint64_t want = (n + block - 1) / block;
    const unsigned grid
        = static_cast<unsigned>(std::clamp<std::uint64_t>(want, 1, static_cast<std::uint64_t>(m_smCount) * 16));
    KL_CU(cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, args, nullptr));
}

double HarnessKernels::largeFactorOf(const TensorSpec& t)
{
    return t.largeScale > 0 && t.scale > 0 ? t.largeScale / t.scale : kLargeFactor;
}

void HarnessKernels::fill(CUstream s, CUdeviceptr p, std::uint64_t n, DType dt, Distribution dist, std::uint64_t seed,
    double scale, double largeFactor) const
{
    int dtc = static_cast<int>(dt);
    int distc = static_cast<int>(dist);
    float sc = static_cast<float>(scale);
    float large = static_cast<float>(largeFactor);
    void* args[] = { &p, &n, &dtc, &distc, &seed, &sc, &large };
    launch(m_fill, s, vectorLanes(n, dt), args);
}

namespace {
    void uploadIntValues(
        CUstream s, CUdeviceptr p, const TensorSpec& t, const Shape& shape, std::uint64_t n, std::uint64_t seed)
    {
        const std::vector<std::int64_t> v = intInputValues(t, shape, n, seed);
        if (t.dtype == DType::I64) {
            // Pageable host memory: the copy is staged before cuMemcpyHtoDAsync returns, and stream-ordered.
            KL_CU(cuMemcpyHtoDAsync(p, v.data(), v.size() * sizeof(std::int64_t), s));
            return;
        }
        const std::vector<std::int32_t> narrow(v.begin(), v.end());
        KL_CU(cuMemcpyHtoDAsync(p, narrow.data(), narrow.size() * sizeof(std::int32_t), s));
    }

    std::uint64_t intSeed(std::uint64_t seed, Distribution dist, int set)
    {
        return seed ^ (0xD1B54A32D192ED03ull * static_cast<std::uint64_t>(static_cast<int>(dist) + 1))
            ^ (0x8CB92BA72F3D8DD7ull * static_cast<std::uint64_t>(set + 1));
    }
} // namespace

void HarnessKernels::fillInput(CUstream s, CUdeviceptr p, const TensorSpec& t, const Shape& shape, std::uint64_t n,
    Distribution dist, std::uint64_t seed) const
{
    if (t.values.kind == IntValues::Kind::Any)
        fill(s, p, n, t.dtype, dist, seed, t.scale, largeFactorOf(t));
    else
        uploadIntValues(s, p, t, shape, n, intSeed(seed, dist, 0));
}

void HarnessKernels::slabFillInput(CUstream s, CUdeviceptr base, const SlabLayout& l, const TensorSpec& t,
    const Shape& shape, std::uint64_t n, Distribution dist, std::uint64_t seed) const
{
    if (t.values.kind == IntValues::Kind::Any) {
        slabFill(s, base, l, n, t.dtype, dist, seed, t.scale, largeFactorOf(t));
        return;
    }
    for (int set = 0; set < l.sets(); ++set)
        uploadIntValues(s, base + l.bufferOffset(set), t, shape, n, intSeed(seed, dist, set));
}

void HarnessKernels::poison(CUstream s, CUdeviceptr p, std::uint64_t n, DType dt, std::uint64_t pattern) const
{
    int dtc = static_cast<int>(dt);
    void* args[] = { &p, &n, &dtc, &pattern };
    launch(m_poison, s, vectorLanes(n, dt), args);
}

void HarnessKernels::sumSquares(CUstream s, CUdeviceptr ref, std::uint64_t n, DType dt, CUdeviceptr out) const
{
    int dtc = static_cast<int>(dt);
    void* args[] = { &ref, &n, &dtc, &out };
    launch(m_sumSquares, s, vectorLanes(n, dt), args);
}

void HarnessKernels::compare(CUstream s, CUdeviceptr cand, CUdeviceptr ref, std::uint64_t n, DType dt,
    std::uint64_t poisonBits, CUdeviceptr slots, CUdeviceptr refSumSq) const
{
    int dtc = static_cast<int>(dt);
    void* args[] = { &cand, &ref, &n, &dtc, &poisonBits, &slots, &refSumSq };
    launch(m_compare, s, vectorLanes(n, dt), args);
}

void HarnessKernels::hash(CUstream s, CUdeviceptr p, std::uint64_t bytes, std::uint64_t salt, CUdeviceptr slot) const
{
    void* args[] = { &p, &bytes, &salt, &slot };
    launch(m_hash, s, bytes / 16 + 1, args);
}

void HarnessKernels::copy(CUstream s, CUdeviceptr src, CUdeviceptr dst, std::uint64_t n16) const
{
    void* args[] = { &src, &dst, &n16 };
    const unsigned block = 256;
    const unsigned grid = static_cast<unsigned>((n16 + block * 4 - 1) / (block * 4));
    KL_CU(cuLaunchKernel(m_copy, grid, 1, 1, block, 1, 1, 0, s, args, nullptr));
}

namespace {
    // Mirrors KlSlab in the kernel source (KL_MAX_SLAB_SETS gap bytes).
    struct SlabParam {
        CUdeviceptr base;
        std::uint64_t stride, lead, pre, bufBytes;
        std::uint32_t sets;
        std::uint8_t gap[SlabLayout::kMaxSets];
    };
    SlabParam slabParam(CUdeviceptr base, const SlabLayout& l)
    {
        SlabParam p {};
        p.base = base;
        p.stride = l.stride;
        p.lead = l.lead;
        p.pre = l.pre;
        p.bufBytes = l.bufferBytes;
        p.sets = static_cast<std::uint32_t>(l.sets());
        std::copy(l.gapUnits.begin(), l.gapUnits.end(), p.gap);
        return p;
    }
} // namespace

void HarnessKernels::launchSlab(
    CUfunction f, CUstream s, const SlabLayout& l, std::uint64_t lanes, bool withLead, void** args) const
{
    const unsigned block = 256;
    const unsigned ySets = static_cast<unsigned>(l.sets()) + (withLead ? 1 : 0);
    const std::uint64_t budget = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(m_smCount) * 16 / ySets);
    const unsigned gx = static_cast<unsigned>(std::clamp<std::uint64_t>((lanes + block - 1) / block, 1, budget));
    KL_CU(cuLaunchKernel(f, gx, ySets, 1, block, 1, 1, 0, s, args, nullptr));
}

void HarnessKernels::slabCanaryFill(CUstream s, CUdeviceptr base, const SlabLayout& l) const
{
    SlabParam p = slabParam(base, l);
    std::uint32_t pattern = kCanaryWord;
    void* args[] = { &p, &pattern };
    launchSlab(m_slabCanaryFill, s, l, (l.stride - l.bufferBytes) / 4 + l.lead / 4, true, args);
}

void HarnessKernels::slabCanaryCheck(CUstream s, CUdeviceptr base, const SlabLayout& l, CUdeviceptr slot) const
{
    SlabParam p = slabParam(base, l);
    std::uint32_t pattern = kCanaryWord;
    void* args[] = { &p, &pattern, &slot };
    launchSlab(m_slabCanaryCheck, s, l, (l.stride - l.bufferBytes) / 4 + l.lead / 4, true, args);
}

void HarnessKernels::slabPoison(
    CUstream s, CUdeviceptr base, const SlabLayout& l, std::uint64_t n, DType dt, std::uint64_t pattern) const
{
    SlabParam p = slabParam(base, l);
    int dtc = static_cast<int>(dt);
    void* args[] = { &p, &n, &dtc, &pattern };
    launchSlab(m_slabPoison, s, l, vectorLanes(n, dt), false, args);
}

void HarnessKernels::slabFill(CUstream s, CUdeviceptr base, const SlabLayout& l, std::uint64_t n, DType dt,
    Distribution dist, std::uint64_t seed, double scale, double largeFactor) const
{
    SlabParam p = slabParam(base, l);
    int dtc = static_cast<int>(dt);
    int distc = static_cast<int>(dist);
    float sc = static_cast<float>(scale);
    float large = static_cast<float>(largeFactor);
    void* args[] = { &p, &n, &dtc, &distc, &seed, &sc, &large };
    launchSlab(m_slabFill, s, l, vectorLanes(n, dt), false, args);
}

void HarnessKernels::comparePairs(CUstream s, CUdeviceptr candPtrs, CUdeviceptr refPtrs, int count, std::uint64_t n,
    DType dt, std::uint64_t poisonBits, CUdeviceptr slots, CUdeviceptr refSumSq, std::uint64_t rmsCount) const
{
    if (count <= 0)
        return;
    int dtc = static_cast<int>(dt);
    void* args[] = { &candPtrs, &refPtrs, &n, &dtc, &poisonBits, &slots, &refSumSq, &rmsCount };
    const unsigned block = 256;
    const std::uint64_t budget = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(m_smCount) * 16 / count);
    const unsigned gx
        = static_cast<unsigned>(std::clamp<std::uint64_t>((vectorLanes(n, dt) + block - 1) / block, 1, budget));
    KL_CU(cuLaunchKernel(m_comparePairs, gx, static_cast<unsigned>(count), 1, block, 1, 1, 0, s, args, nullptr));
}

void HarnessKernels::copyPairs(
    CUstream s, CUdeviceptr srcPtrs, CUdeviceptr dstPtrs, int count, std::uint64_t bytes) const
{
    if (count <= 0 || bytes == 0)
        return;
    void* args[] = { &srcPtrs, &dstPtrs, &bytes };
    const unsigned block = 256;
    const std::uint64_t budget = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(m_smCount) * 16 / count);
    const unsigned gx = static_cast<unsigned>(std::clamp<std::uint64_t>((bytes / 16 + block - 1) / block, 1, budget));
    KL_CU(cuLaunchKernel(m_copyPairs, gx, static_cast<unsigned>(count), 1, block, 1, 1, 0, s, args, nullptr));
}

void HarnessKernels::spin(CUstream s, std::uint64_t cycles) const
{
    void* args[] = { &cycles };
    KL_CU(cuLaunchKernel(m_spin, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
}

std::uint64_t HarnessKernels::poisonPattern(DType dt, int variant)
{
    // Quiet NaNs with payloads no arithmetic produces, so an untouched element is recognisable.
    switch (dt) {
    case DType::F32:
        return variant ? 0xFFA5C3E1u : 0x7FA5C3E1u;
    case DType::F16:
        return variant ? 0xFEA5u : 0x7EA5u;
    case DType::BF16:
        return variant ? 0xFFA5u : 0x7FA5u;
    case DType::F64:
        return variant ? 0xFFF5A5C3E1B2D4F6ull : 0x7FF5A5C3E1B2D4F6ull;
    case DType::I32:
        return variant ? 0x80000001u : 0x7FFFFFF1u;
    case DType::I64:
        return variant ? 0x8000000000000001ull : 0x7FFFFFFFFFFFFFF1ull;
    case DType::FP8E4M3:
        return variant ? 0xFFu : 0x7Fu; // e4m3's two NaN encodings
    default:
        return variant ? 0x5Au : 0xA5u;
    }
}

} // namespace kl::worker
