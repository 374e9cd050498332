#include "kernels/worker/engine.h"

#include "core/errors.h"
#include "kernels/stats.h"
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/engine_buffers.h"
#include "kernels/worker/launch_plans.h"

#ifdef KL_WORKER_HAVE_CUBLAS
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cstdlib>

namespace kl::worker {

std::vector<TensorSize> tensorSizes(const Problem& p, const Shape& s)
{
    std::vector<TensorSize> out;
    const Bindings b = s.bindings();
    for (const auto& t : p.tensors) {
        std::uint64_t n = 1;
        for (const auto& e : t.shape)
            n *= static_cast<std::uint64_t>(std::max<std::int64_t>(0, e.evaluateInt(b)));
        out.push_back({ &t, n, n * dtypeBytes(t.dtype) });
    }
    return out;
}

CandidateSlab tensorSlab(const TensorSize& t, int sets, std::uint64_t granularity, std::mt19937_64& rng)
{
    CandidateSlab cs;
    cs.name = t.spec->name;
    cs.layout = planSlab(t.bytes, sets, granularity, rng);
    cs.elements = t.elements;
    cs.dtype = t.spec->dtype;
    cs.role = t.spec->role;
    return cs;
}

CandidateSlab workspaceSlab(const WorkspaceNeed& w, int sets, std::uint64_t granularity, std::mt19937_64& rng)
{
    CandidateSlab cs;
    cs.name = w.name;
    cs.layout = planSlab(w.bytes, sets, granularity, rng);
    cs.elements = w.bytes / 4;
    cs.dtype = DType::I32;
    cs.role = TensorRole::Output;
    cs.workspace = true;
    cs.zeroInit = w.zeroInit;
    return cs;
}

void LaunchLedger::note(const std::string& symbol, const unsigned g[3], const unsigned b[3])
{
    if (!active)
        return;
    ExpectedKernel k;
    k.symbol = symbol;
    for (int d = 0; d < 3; ++d) {
        k.grid[d] = static_cast<int>(g[d]);
        k.block[d] = static_cast<int>(b[d]);
    }
    launched.push_back(std::move(k));
}

LaunchLedger& launchLedger()
{
    static LaunchLedger ledger;
    return ledger;
}

Engine::Engine()
    : m_rng(std::random_device {}())
{
    KL_CU(cuInit(0));
    int index = 0;
    if (const char* env = std::getenv("KL_DEVICE"))
        index = std::atoi(env);
    KL_CU(cuDeviceGet(&m_dev, index));
    KL_CU(cuDevicePrimaryCtxRetain(&m_ctx, m_dev));
    KL_CU(cuCtxSetCurrent(m_ctx));
    // One context: a second CUDA context on the same device shares the process's GPU address space (measured on
    // the H200: a kernel in one context read memory allocated in another), so it isolates nothing. Harness memory
    // is kept out of reach by placement instead (device_memory.h); the harness's work runs on its own stream.
    KL_CU(cuStreamCreate(&m_hstream, CU_STREAM_NON_BLOCKING));
    KL_CU(cuStreamCreate(&m_stream, CU_STREAM_NON_BLOCKING));
    m_cand.init(m_dev, m_rng());
    m_hmem.init(m_dev, m_rng());

    char name[256] = {};
    KL_CU(cuDeviceGetName(name, sizeof(name), m_dev));
    m_device.name = name;
    auto attr = [&](CUdevice_attribute a) {
        int v = 0;
        cuDeviceGetAttribute(&v, a, m_dev);
        return v;
    };
    m_device.ccMajor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    m_device.ccMinor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    m_device.arch = archForComputeCapability(m_device.ccMajor, m_device.ccMinor);
    if (const char* a = std::getenv("KL_ARCH"))
        m_device.arch = a;
    m_device.smCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    m_device.l2Bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    m_device.sharedPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    m_device.sharedPerBlockOptin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    m_device.sharedPerSm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    m_device.regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    m_device.regsPerSm = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    m_device.maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    m_device.maxThreadsPerSm = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    m_device.warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    m_device.memBusWidthBits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    m_device.smClockMHz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE) / 1000;
    m_device.memClockMHz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) / 1000;
    std::size_t total = 0;
    KL_CU(cuDeviceTotalMem(&total, m_dev));
    m_device.globalMemBytes = static_cast<std::int64_t>(total);
    int drv = 0;
    KL_CU(cuDriverGetVersion(&drv));
    m_device.cudaDriverApi = std::to_string(drv / 1000) + "." + std::to_string((drv % 1000) / 10);
    m_device.cudaRuntime = std::to_string(CUDA_VERSION / 1000) + "." + std::to_string((CUDA_VERSION % 1000) / 10);
    m_device.nvrtcVersion = nvrtcVersionString();
    CUuuid uuid;
    if (cuDeviceGetUuid(&uuid, m_dev) == CUDA_SUCCESS) {
        char buf[64];
        const auto* u = reinterpret_cast<const unsigned char*>(uuid.bytes);
        std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
            u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        m_device.uuid = buf;
    }
    char pci[64] = {};
    if (cuDeviceGetPCIBusId(pci, sizeof(pci), m_dev) == CUDA_SUCCESS && m_nvml.open(pci)) {
        m_device.driverVersion = m_nvml.driverVersion();
        if (int c = m_nvml.maxSmClockMHz())
            m_device.smClockMHz = c;
        if (int c = m_nvml.maxMemClockMHz())
            m_device.memClockMHz = c;
    }
    if (m_device.driverVersion.empty())
        m_device.driverVersion = std::to_string(drv);

    m_nvml.startSampler(50);
    m_compiler = std::make_unique<NvrtcCompiler>(defaultCompileCacheDir(), 0);
    m_harness.load(*m_compiler, m_device.arch);
    measureCopyBandwidth();
    // KL_L2_EVICT=0: time as before the eviction existed, for an A/B of its effect.
    const char* evict = std::getenv("KL_L2_EVICT");
    if (!(evict && std::string(evict) == "0") && m_device.l2Bytes > 0) {
        m_l2EvictBytes = 2 * static_cast<std::uint64_t>(m_device.l2Bytes);
        KL_CU(cuMemAlloc(&m_l2Evict, m_l2EvictBytes));
        KL_CU(cuMemsetD8Async(m_l2Evict, 0, m_l2EvictBytes, m_stream));
    }
}

Engine::~Engine()
{
    if (m_ctx) {
        cuCtxSynchronize();
        m_modules.clear();
        m_problems.clear();
#ifdef KL_WORKER_HAVE_CUBLAS
        if (m_cublas)
            cublasDestroy(static_cast<cublasHandle_t>(m_cublas));
#endif
        if (m_cublasWorkspace)
            cuMemFree(m_cublasWorkspace);
        if (m_l2Evict)
            cuMemFree(m_l2Evict);
        for (const auto& ring : m_handoffEvents)
            for (auto e : ring)
                cuEventDestroy(e);
        cuStreamDestroy(m_stream);
        cuStreamDestroy(m_hstream);
        m_hmem.free();
        m_harness.unload();
        cuDevicePrimaryCtxRelease(m_dev);
    }
}

void Engine::handoff(CUstream from, CUstream to)
{
    const bool fromHarness = from == m_hstream;
    auto& ring = m_handoffEvents[fromHarness ? 1 : 0];
    if (ring.empty()) {
        ring.resize(64);
        for (auto& e : ring)
            KL_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    }
    CUevent e = ring[m_handoffNext[fromHarness ? 1 : 0]++ % ring.size()];
    KL_CU(cuEventRecord(e, from));
    KL_CU(cuStreamWaitEvent(to, e, 0));
}

void Engine::evictDirtyL2(CUstream s, CUdeviceptr slot)
{
    if (m_l2Evict)
        m_harness.hash(s, m_l2Evict, m_l2EvictBytes, 0, slot);
}

void Engine::measureCopyBandwidth()
{
    const std::uint64_t bytes = 1ull << 30;
    arenaReserve(2 * bytes + (16u << 20));
    arenaReset();
    const CUdeviceptr src = arenaAlloc(bytes);
    const CUdeviceptr dst = arenaAlloc(bytes);
    KL_CU(cuMemsetD32Async(src, 0x3F800000u, bytes / 4, m_stream));
    CUevent e0, e1;
    KL_CU(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    KL_CU(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    // The better of our copy kernel and the driver's device-to-device copy is the ceiling.
    std::vector<double> kernelMs, driverMs;
    for (int i = 0; i < 10; ++i) {
        for (int which = 0; which < 2; ++which) {
            KL_CU(cuEventRecord(e0, m_stream));
            if (which == 0)
                m_harness.copy(m_stream, src, dst, bytes / 16);
            else
                KL_CU(cuMemcpyDtoDAsync(dst, src, bytes, m_stream));
            KL_CU(cuEventRecord(e1, m_stream));
            KL_CU(cuEventSynchronize(e1));
            float t = 0;
            KL_CU(cuEventElapsedTime(&t, e0, e1));
            if (i >= 2)
                (which == 0 ? kernelMs : driverMs).push_back(t);
        }
    }
    cuEventDestroy(e0);
    cuEventDestroy(e1);
    const double med = std::min(percentile(kernelMs, 0.5), percentile(driverMs, 0.5));
    std::fprintf(stderr, "[worker] copy 1 GiB: kernel %.3f ms, cuMemcpyDtoD %.3f ms\n", percentile(kernelMs, 0.5),
        percentile(driverMs, 0.5));
    if (med > 0)
        m_device.measuredCopyBandwidth = 2.0 * static_cast<double>(bytes) / (med * 1e-3);
}

// ---------------------------------------------------------------------------------------------------------
// Memory

void Engine::arenaReserve(std::uint64_t bytes)
{
    // Every buffer of arenaAlloc is its own mapping: room for the rounding of a few dozen of them.
    m_arenaNeed = bytes + 64 * m_cand.granularity();
}

void Engine::arenaReset()
{
    KL_CU(cuStreamSynchronize(m_stream));
    m_cand.reset(m_arenaNeed);
}

CUdeviceptr Engine::arenaAlloc(std::uint64_t bytes)
{
    const std::uint64_t mapped = alignUp(std::max<std::uint64_t>(bytes, 4), m_cand.granularity());
    return m_cand.map(mapped) + mapped - alignUp(std::max<std::uint64_t>(bytes, 4), kAlign);
}

CUdeviceptr Engine::mapSlab(const SlabLayout& l)
{
    return m_cand.map(l.mappedBytes);
}

// ---------------------------------------------------------------------------------------------------------
// Plans and problems

std::shared_ptr<Plan> Engine::compilePlan(const std::string& source, const ParamValues& params, const std::string& name,
    CompileReport* report, std::string* key, const std::vector<std::string>& extraFlags)
{
    KernelSpec spec = parseKernelSpec(source);
    CompileJob job;
    job.source = source;
    job.params = params;
    job.extraFlags = extraFlags;
    job.arch = m_device.arch;
    job.name = name;
    for (const auto& l : spec.launches)
        if (std::find(job.kernels.begin(), job.kernels.end(), l.kernel) == job.kernels.end())
            job.kernels.push_back(l.kernel);
    auto m = m_compiler->compile(job);
    if (report)
        *report = m->report;
    if (key)
        *key = m->key;
    if (!m->report.ok)
        return nullptr;
    CUmodule mod = nullptr;
    KL_CU(cuModuleLoadData(&mod, m->cubin.data()));
    return makeKernelPlan(mod, std::move(spec), params, m->loweredNames, m_device, name);
}

const LoadedProblem& Engine::loadProblem(
    const Problem& p, const std::string& referenceSource, const std::string& baselineSource)
{
    LoadedProblem lp;
    lp.problem = p;
    {
        const ParamValues defaults = parseKernelSpec(referenceSource).defaults();
        lp.reference = compilePlan(
            referenceSource, defaults, p.name + "/reference.cu", &lp.referenceCompile, nullptr, { "-DKL_ACC=double" });
        if (!lp.reference)
            throw InputError(
                p.name + "/reference.cu does not compile with -DKL_ACC=double:\n" + lp.referenceCompile.log);
        CompileReport fp32;
        lp.referenceFp32 = compilePlan(referenceSource, defaults, p.name + "/reference.cu", &fp32);
        if (!lp.referenceFp32)
            throw InputError(p.name + "/reference.cu does not compile:\n" + fp32.log);
    }
    if (!p.libraryBaseline.empty()) {
        if (p.libraryBaseline != "cublas_gemm_bf16")
            throw InputError(p.name + ": unknown library_baseline '" + p.libraryBaseline + "'");
#ifdef KL_WORKER_HAVE_CUBLAS
        if (!m_cublas) {
            cudaSetDevice(static_cast<int>(m_dev));
            cublasHandle_t h = nullptr;
            if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
                throw std::runtime_error("cublasCreate failed");
            KL_CU(cuMemAlloc(&m_cublasWorkspace, 32u << 20));
            cublasSetWorkspace(h, reinterpret_cast<void*>(m_cublasWorkspace), 32u << 20);
            m_cublas = h;
        }
        lp.baseline = makeCublasGemmPlan(m_cublas);
        lp.baselineKind = "library:" + p.libraryBaseline;
#endif
    }
    if (!lp.baseline) {
        lp.baseline = compilePlan(
            baselineSource, parseKernelSpec(baselineSource).defaults(), p.name + "/baseline.cu", &lp.baselineCompile);
        if (!lp.baseline)
            throw InputError(p.name + "/baseline.cu does not compile:\n" + lp.baselineCompile.log);
        lp.baselineKind = "baseline.cu";
    }
    calibrateTolerances(lp);
    m_problems[p.name] = std::move(lp);
    return m_problems[p.name];
}

const LoadedProblem* Engine::problem(const std::string& name) const
{
    auto it = m_problems.find(name);
    return it == m_problems.end() ? nullptr : &it->second;
}

std::shared_ptr<Plan> Engine::candidatePlan(const CandidateModuleSpec& spec, CompileReport* report, std::string* keyOut)
{
    if (keyOut)
        *keyOut = spec.key;
    if (!spec.key.empty()) {
        auto it = m_modules.find(spec.key);
        if (it != m_modules.end()) {
            if (report) {
                report->ok = true;
                report->cacheHit = true;
            }
            return it->second;
        }
    }
    std::shared_ptr<Plan> plan;
    std::string key = spec.key;
    if (!spec.cubin.empty()) {
        KernelSpec ks = parseKernelSpec(spec.source);
        CUmodule mod = nullptr;
        KL_CU(cuModuleLoadData(&mod, spec.cubin.data()));
        plan = makeKernelPlan(mod, std::move(ks), spec.params, spec.lowered, m_device, "candidate", spec.abi);
        if (report)
            report->ok = true;
    } else {
        plan = compilePlan(spec.source, spec.params, "candidate", report, &key);
        if (!plan)
            return nullptr;
    }
    if (keyOut)
        *keyOut = key;
    if (!key.empty()) {
        m_modules[key] = plan;
        m_moduleOrder.push_back(key);
        while (m_moduleOrder.size() > 256) {
            m_modules.erase(m_moduleOrder.front());
            m_moduleOrder.erase(m_moduleOrder.begin());
        }
    }
    return plan;
}

} // namespace kl::worker
