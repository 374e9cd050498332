#include "kernels/worker/engine.h"

#include "core/errors.h"
#include "kernels/stats.h"
#include "kernels/worker/cuda_check.h"

#ifdef KL_WORKER_HAVE_CUBLAS
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <utility>

namespace kl::worker {

namespace {

    constexpr std::uint64_t kGuardBytes = 4096;
    constexpr std::uint64_t kAlign = 256;

    std::uint64_t alignUp(std::uint64_t v, std::uint64_t a)
    {
        return (v + a - 1) / a * a;
    }

    double nowSeconds()
    {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }

    std::string geometryText(const unsigned g[3], const unsigned b[3])
    {
        std::ostringstream s;
        s << "grid=(" << g[0] << "," << g[1] << "," << g[2] << ") block=(" << b[0] << "," << b[1] << "," << b[2] << ")";
        return s.str();
    }

    // ---------------------------------------------------------------------------------------------------------
    // Kernel plans: a loaded CUBIN plus the @kl launch plan.

    struct BoundArg {
        enum Kind { Ptr, I32, F32 } kind = Ptr;
        std::string name;
        std::int32_t i = 0;
        float f = 0;
    };

    struct BoundStep {
        CUfunction fn = nullptr;
        std::string symbol;
        unsigned grid[3] = { 1, 1, 1 };
        unsigned block[3] = { 1, 1, 1 };
        unsigned smem = 0;
        std::vector<BoundArg> args;
    };

    class KernelBound final : public BoundPlan {
    public:
        std::vector<BoundStep> steps;
        std::vector<WorkspaceNeed> ws;

        void run(CUstream s, const BufferMap& buffers) const override
        {
            for (const auto& w : ws)
                if (w.zeroInit && w.bytes)
                    KL_CU(cuMemsetD8Async(buffers.at(w.name), 0, w.bytes, s));
            for (const auto& st : steps) {
                std::uint64_t storage[32];
                void* argv[32];
                for (std::size_t i = 0; i < st.args.size(); ++i) {
                    const auto& a = st.args[i];
                    switch (a.kind) {
                    case BoundArg::Ptr: {
                        const CUdeviceptr p = buffers.at(a.name);
                        std::memcpy(&storage[i], &p, sizeof(p));
                        break;
                    }
                    case BoundArg::I32:
                        std::memcpy(&storage[i], &a.i, sizeof(a.i));
                        break;
                    case BoundArg::F32:
                        std::memcpy(&storage[i], &a.f, sizeof(a.f));
                        break;
                    }
                    argv[i] = &storage[i];
                }
                launchLedger().note(st.symbol, st.grid, st.block);
                KL_CU(cuLaunchKernel(st.fn, st.grid[0], st.grid[1], st.grid[2], st.block[0], st.block[1], st.block[2],
                    st.smem, s, argv, nullptr));
            }
        }
        const std::vector<WorkspaceNeed>& workspaces() const override { return ws; }
        std::vector<std::string> symbols() const override
        {
            std::vector<std::string> out;
            for (const auto& s : steps)
                out.push_back(s.symbol);
            return out;
        }
    };

    class KernelPlan final : public Plan {
    public:
        KernelPlan(CUmodule mod, KernelSpec spec, ParamValues params, const std::map<std::string, std::string>& lowered,
            const DeviceInfo& dev, std::string label)
            : m_module(mod)
            , m_spec(std::move(spec))
            , m_params(std::move(params))
            , m_dev(dev)
            , m_label(std::move(label))
        {
            try {
                resolveFunctions(lowered);
            } catch (...) {
                cuModuleUnload(m_module); // the destructor does not run for a throwing constructor
                m_module = nullptr;
                throw;
            }
        }

        void resolveFunctions(const std::map<std::string, std::string>& lowered)
        {
            for (const auto& step : m_spec.launches) {
                if (step.kernel.rfind("kl_h_", 0) == 0)
                    throw LaunchConfigError("kernel names starting with kl_h_ are reserved for the harness");
                if (m_fns.count(step.kernel))
                    continue;
                Fn f;
                auto it = lowered.find(step.kernel);
                f.symbol = it != lowered.end() ? it->second : step.kernel;
                KL_CU(cuModuleGetFunction(&f.fn, m_module, f.symbol.c_str()));
                KL_CU(cuFuncGetAttribute(&f.maxThreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f.fn));
                KL_CU(cuFuncGetAttribute(&f.staticSmem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f.fn));
                m_fns[step.kernel] = f;
            }
        }
        ~KernelPlan() override
        {
            if (m_module)
                cuModuleUnload(m_module);
        }
        std::string label() const override { return m_label; }

        std::unique_ptr<BoundPlan> bind(const Problem& p, const Shape& s) const override
        {
            auto b = std::make_unique<KernelBound>();
            const Bindings dims = s.bindings();
            std::string why;
            if (!m_spec.satisfies(m_params, dims, &why))
                throw LaunchConfigError(m_label + ": " + why + " for shape " + s.label());
            const Bindings vars = bindingsFor(m_params, dims);
            auto evalInt = [&](const Expr& e, const std::string& what, int line) -> std::int64_t {
                try {
                    return e.evaluateInt(vars);
                } catch (const std::exception& ex) {
                    throw LaunchConfigError(
                        m_label + " line " + std::to_string(line) + ": " + what + " '" + e.text() + "': " + ex.what());
                }
            };
            for (const auto& w : m_spec.workspaces) {
                const std::int64_t bytes = evalInt(w.bytes, "workspace bytes", w.line);
                if (bytes < 0 || bytes > (std::int64_t { 64 } << 30))
                    throw LaunchConfigError(
                        m_label + ": workspace " + w.name + " has " + std::to_string(bytes) + " bytes");
                b->ws.push_back({ w.name, static_cast<std::uint64_t>(bytes), w.zeroInit });
            }
            for (const auto& step : m_spec.launches) {
                const Fn& fn = m_fns.at(step.kernel);
                BoundStep st;
                st.fn = fn.fn;
                st.symbol = fn.symbol;
                std::int64_t threads = 1;
                for (int d = 0; d < 3; ++d) {
                    const std::int64_t g = evalInt(step.grid[d], "grid", step.line);
                    const std::int64_t bl = evalInt(step.block[d], "block", step.line);
                    const std::int64_t gmax = d == 0 ? INT32_MAX : 65535;
                    const std::int64_t bmax = d == 2 ? 64 : 1024;
                    if (g < 1 || g > gmax)
                        throw LaunchConfigError(m_label + " line " + std::to_string(step.line) + ": grid dimension "
                            + std::to_string(d) + " = " + std::to_string(g) + " is outside [1, " + std::to_string(gmax)
                            + "] for shape " + s.label());
                    if (bl < 1 || bl > bmax)
                        throw LaunchConfigError(m_label + " line " + std::to_string(step.line) + ": block dimension "
                            + std::to_string(d) + " = " + std::to_string(bl) + " is outside [1, " + std::to_string(bmax)
                            + "]");
                    st.grid[d] = static_cast<unsigned>(g);
                    st.block[d] = static_cast<unsigned>(bl);
                    threads *= bl;
                }
                if (threads > fn.maxThreads)
                    throw LaunchConfigError(m_label + " line " + std::to_string(step.line) + ": "
                        + std::to_string(threads) + " threads per block, but " + step.kernel + " can run at most "
                        + std::to_string(fn.maxThreads) + " (registers)");
                const std::int64_t smem = evalInt(step.sharedBytes, "smem", step.line);
                if (smem < 0 || smem + fn.staticSmem > m_dev.sharedPerBlockOptin)
                    throw LaunchConfigError(m_label + " line " + std::to_string(step.line) + ": " + std::to_string(smem)
                        + " bytes of dynamic shared memory exceed the device limit of "
                        + std::to_string(m_dev.sharedPerBlockOptin - fn.staticSmem));
                st.smem = static_cast<unsigned>(smem);
                if (smem > 48 * 1024)
                    KL_CU(cuFuncSetAttribute(
                        fn.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)));
                if (step.args.size() > 32)
                    throw LaunchConfigError(m_label + ": more than 32 kernel arguments");
                for (const auto& a : step.args) {
                    BoundArg arg;
                    arg.name = a;
                    if (p.tensor(a)) {
                        arg.kind = BoundArg::Ptr;
                    } else if (std::any_of(
                                   b->ws.begin(), b->ws.end(), [&](const WorkspaceNeed& w) { return w.name == a; })) {
                        arg.kind = BoundArg::Ptr;
                    } else if (s.dims.count(a)) {
                        const std::int64_t v = s.dims.at(a);
                        if (v > INT32_MAX)
                            throw LaunchConfigError("dim " + a + " does not fit an int argument");
                        arg.kind = BoundArg::I32;
                        arg.i = static_cast<std::int32_t>(v);
                    } else if (const ScalarSpec* sc = [&]() -> const ScalarSpec* {
                                   for (const auto& x : p.scalars)
                                       if (x.name == a)
                                           return &x;
                                   return nullptr;
                               }()) {
                        if (sc->dtype == DType::I32) {
                            arg.kind = BoundArg::I32;
                            arg.i = static_cast<std::int32_t>(sc->value);
                        } else {
                            arg.kind = BoundArg::F32;
                            arg.f = static_cast<float>(sc->value);
                        }
                    } else if (m_params.count(a)) {
                        arg.kind = BoundArg::I32;
                        arg.i = static_cast<std::int32_t>(m_params.at(a));
                    } else {
                        throw LaunchConfigError(m_label + " line " + std::to_string(step.line) + ": kernel argument '"
                            + a + "' is not a tensor, workspace, dim, scalar or parameter of " + p.name);
                    }
                    st.args.push_back(arg);
                }
                b->steps.push_back(std::move(st));
            }
            return b;
        }

    private:
        struct Fn {
            CUfunction fn = nullptr;
            std::string symbol;
            int maxThreads = 1024;
            int staticSmem = 0;
        };
        CUmodule m_module;
        KernelSpec m_spec;
        ParamValues m_params;
        DeviceInfo m_dev;
        std::string m_label;
        std::map<std::string, Fn> m_fns;
    };

#ifdef KL_WORKER_HAVE_CUBLAS
    // C[M,N] = A[M,K] * B[N,K]^T in bf16 with fp32 accumulation: the library baseline an exported dispatcher
    // falls back to. Row-major C is column-major C^T = B * A^T, so cuBLAS sees op(B)=T, op(A)=N.
    class CublasGemmBound final : public BoundPlan {
    public:
        cublasHandle_t handle = nullptr;
        std::string a, b, c;
        int m = 0, n = 0, k = 0;
        std::vector<WorkspaceNeed> none;
        void run(CUstream s, const BufferMap& buffers) const override
        {
            cublasSetStream(handle, s);
            const float alpha = 1.0f, beta = 0.0f;
            const auto st = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha,
                reinterpret_cast<const void*>(buffers.at(b)), CUDA_R_16BF, k,
                reinterpret_cast<const void*>(buffers.at(a)), CUDA_R_16BF, k, &beta,
                reinterpret_cast<void*>(buffers.at(c)), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS)
                throw std::runtime_error("cublasGemmEx failed with status " + std::to_string(static_cast<int>(st)));
        }
        const std::vector<WorkspaceNeed>& workspaces() const override { return none; }
        std::vector<std::string> symbols() const override { return {}; }
    };

    class CublasGemmPlan final : public Plan {
    public:
        explicit CublasGemmPlan(cublasHandle_t h)
            : m_handle(h)
        {
        }
        std::string label() const override { return "library:cublas_gemm_bf16"; }
        std::unique_ptr<BoundPlan> bind(const Problem& p, const Shape& s) const override
        {
            auto b = std::make_unique<CublasGemmBound>();
            b->handle = m_handle;
            std::vector<const TensorSpec*> in, out;
            for (const auto& t : p.tensors)
                (t.role == TensorRole::Input ? in : out).push_back(&t);
            if (in.size() != 2 || out.size() != 1 || !s.dims.count("M") || !s.dims.count("N") || !s.dims.count("K"))
                throw LaunchConfigError("cublas_gemm_bf16 needs inputs A[M,K], B[N,K], output C[M,N] and dims M, N, K");
            b->a = in[0]->name;
            b->b = in[1]->name;
            b->c = out[0]->name;
            b->m = static_cast<int>(s.dims.at("M"));
            b->n = static_cast<int>(s.dims.at("N"));
            b->k = static_cast<int>(s.dims.at("K"));
            return b;
        }

    private:
        cublasHandle_t m_handle;
    };
#endif

    struct TensorSize {
        const TensorSpec* spec;
        std::uint64_t elements;
        std::uint64_t bytes;
    };

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

    struct Guarded {
        CUdeviceptr ptr = 0;
        std::uint64_t bytes = 0;
        CUdeviceptr pre = 0;
        CUdeviceptr post = 0;
    };

    std::uint64_t guardedFootprint(std::uint64_t bytes)
    {
        return 2 * kGuardBytes + alignUp(bytes, kAlign) + 2 * kAlign;
    }

} // namespace

// ---------------------------------------------------------------------------------------------------------

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
    KL_CU(cuStreamCreate(&m_stream, CU_STREAM_NON_BLOCKING));

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
        if (m_arena)
            cuMemFree(m_arena);
        if (m_cublasWorkspace)
            cuMemFree(m_cublasWorkspace);
        cuStreamDestroy(m_stream);
        cuDevicePrimaryCtxRelease(m_dev);
    }
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
    bytes = alignUp(bytes + (8u << 20), 1u << 20);
    if (bytes <= m_arenaBytes)
        return;
    KL_CU(cuStreamSynchronize(m_stream));
    if (m_arena) {
        KL_CU(cuMemFree(m_arena));
        m_arena = 0;
        m_arenaBytes = 0;
    }
    const std::uint64_t want = std::max<std::uint64_t>(bytes, 512ull << 20);
    const CUresult r = cuMemAlloc(&m_arena, want);
    if (r != CUDA_SUCCESS) {
        m_arena = 0;
        throw std::runtime_error(
            "cannot allocate " + std::to_string(want >> 20) + " MiB of device memory: " + cuErrorText(r));
    }
    m_arenaBytes = want;
}

void Engine::arenaReset()
{
    // A random start so no buffer lands at the address it had in the previous call.
    m_arenaTop = (m_rng() % 4096) * kAlign;
}

CUdeviceptr Engine::arenaAlloc(std::uint64_t bytes)
{
    const std::uint64_t gap = (m_rng() % 64) * kAlign;
    const std::uint64_t off = alignUp(m_arenaTop + gap, kAlign);
    if (off + bytes > m_arenaBytes)
        throw std::runtime_error("harness arena exhausted (internal sizing error)");
    m_arenaTop = off + bytes;
    return m_arena + off;
}

// ---------------------------------------------------------------------------------------------------------
// Plans and problems

std::shared_ptr<Plan> Engine::compilePlan(const std::string& source, const ParamValues& params, const std::string& name,
    CompileReport* report, std::string* key)
{
    KernelSpec spec = parseKernelSpec(source);
    CompileJob job;
    job.source = source;
    job.params = params;
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
    return std::make_shared<KernelPlan>(mod, std::move(spec), params, m->loweredNames, m_device, name);
}

const LoadedProblem& Engine::loadProblem(
    const Problem& p, const std::string& referenceSource, const std::string& baselineSource)
{
    LoadedProblem lp;
    lp.problem = p;
    lp.reference = compilePlan(
        referenceSource, parseKernelSpec(referenceSource).defaults(), p.name + "/reference.cu", &lp.referenceCompile);
    if (!lp.reference)
        throw InputError(p.name + "/reference.cu does not compile:\n" + lp.referenceCompile.log);
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
        lp.baseline = std::make_shared<CublasGemmPlan>(static_cast<cublasHandle_t>(m_cublas));
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
        plan = std::make_shared<KernelPlan>(mod, std::move(ks), spec.params, spec.lowered, m_device, "candidate");
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

// ---------------------------------------------------------------------------------------------------------
// Verification

namespace {

    struct CheckSpec {
        std::string name;
        Distribution dist;
        std::uint64_t seed;
        int inputSet; // 0: P, 1: P'
        int outputSet; // 0: Q, 1: Q'
        int refSet; // 0: R1, 1: R2
        bool computeRef;
        int poisonVariant;
    };

    VerdictReason reason(const std::string& rule, const std::string& msg, bool blocking = true)
    {
        VerdictReason r;
        r.rule = rule;
        r.message = msg;
        r.blocking = blocking;
        return r;
    }

    void addReason(std::vector<VerdictReason>& out, VerdictReason r)
    {
        for (const auto& x : out)
            if (x.rule == r.rule)
                return; // the first instance carries the message; per-shape numbers are in the shape results
        out.push_back(std::move(r));
    }

    std::string fmt(double v)
    {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.3g", v);
        return buf;
    }

} // namespace

VerifyOutcome Engine::verify(const LoadedProblem& lp, const Plan& candidate, const VerifyOptions& o)
{
    VerifyOutcome out;
    const double verifyStart = nowSeconds();
    const Problem& p = lp.problem;
    auto& ledger = launchLedger();
    const bool cupti = o.cupti && CuptiKernelLog::instance().available();
    if (cupti) {
        KL_CU(cuCtxSynchronize());
        ledger.launched.clear();
        ledger.active = true;
        CuptiKernelLog::instance().start();
    }
    std::set<std::string> candidateSymbols;
    bool anyVisibleFailed = false;
    bool anyHeldOutFailed = false;

    for (std::size_t si = 0; si < o.shapes.size(); ++si) {
        const Shape& shape = o.shapes[si];
        ShapeResult sr;
        sr.shape = shape;
        sr.heldOut = si < o.heldOut.size() && o.heldOut[si];
        const std::string where = sr.heldOut ? std::string("a held-out shape") : "shape " + shape.label();
        std::unique_ptr<BoundPlan> cb, rb;
        try {
            cb = candidate.bind(p, shape);
        } catch (const LaunchConfigError& e) {
            sr.correct = false;
            addReason(out.reasons,
                reason("launch.invalid-config",
                    sr.heldOut ? "the launch plan cannot run a held-out shape of the validity range" : e.what()));
            (sr.heldOut ? anyHeldOutFailed : anyVisibleFailed) = true;
            out.shapes.push_back(sr);
            continue;
        }
        for (const auto& s : cb->symbols())
            candidateSymbols.insert(s);
        rb = lp.reference->bind(p, shape);

        const auto sizes = tensorSizes(p, shape);
        std::uint64_t need = 0;
        int nIn = 0, nOut = 0;
        for (const auto& t : sizes) {
            if (t.spec->role == TensorRole::Input) {
                need += 2 * alignUp(t.bytes, kAlign) + 2 * 64 * kAlign;
                ++nIn;
            } else {
                need += 2 * alignUp(t.bytes, kAlign) + 2 * guardedFootprint(t.bytes) + 4 * 64 * kAlign;
                ++nOut;
            }
        }
        for (const auto& w : cb->workspaces())
            need += guardedFootprint(w.bytes) + 64 * kAlign;
        for (const auto& w : rb->workspaces())
            need += alignUp(w.bytes, kAlign) + 64 * kAlign;
        const int nChecks = 6;
        const std::uint64_t slotBytes = nChecks * kSlotCount * 8, refStatBytes = nChecks * 8 * std::max(nOut, 1);
        need += slotBytes + refStatBytes + 64 * kAlign + 4096 * kAlign;
        arenaReserve(need);
        arenaReset();

        const CUdeviceptr slots = arenaAlloc(slotBytes + refStatBytes);
        const CUdeviceptr refStatArea = slots + slotBytes;
        KL_CU(cuMemsetD8Async(slots, 0, slotBytes + refStatBytes, m_stream));
        BufferMap inputs[2], outputs[2], refs[2], work, refWork;
        std::vector<Guarded> guards;
        auto guarded = [&](std::uint64_t bytes) {
            Guarded g;
            g.pre = arenaAlloc(guardedFootprint(bytes) - 2 * kAlign);
            g.ptr = g.pre + kGuardBytes;
            g.bytes = bytes;
            g.post = g.ptr + alignUp(bytes, 4);
            guards.push_back(g);
            return g;
        };
        for (int set = 0; set < 2; ++set)
            for (const auto& t : sizes) {
                if (t.spec->role == TensorRole::Input)
                    inputs[set][t.spec->name] = arenaAlloc(std::max<std::uint64_t>(t.bytes, 4));
                else {
                    refs[set][t.spec->name] = arenaAlloc(std::max<std::uint64_t>(t.bytes, 4));
                    outputs[set][t.spec->name] = guarded(t.bytes).ptr;
                }
            }
        for (const auto& w : cb->workspaces())
            work[w.name] = guarded(w.bytes).ptr;
        std::vector<CUdeviceptr> guardRegions;
        for (const auto& g : guards) {
            guardRegions.push_back(g.pre);
            guardRegions.push_back(g.post);
        }
        for (const auto& w : rb->workspaces())
            refWork[w.name] = arenaAlloc(std::max<std::uint64_t>(w.bytes, 4));

        const std::uint64_t seedA = o.seed ^ (0x51ED2701ull * (si + 1));
        const std::vector<CheckSpec> checks = {
            { "order:A", Distribution::Normal, seedA, 0, 0, 0, true, 0 },
            { "order:B", Distribution::Normal, seedA ^ 0xB0B0B0B0ull, 0, 0, 1, true, 1 },
            { "order:A'", Distribution::Normal, seedA, 1, 1, 0, false, 1 },
            { "large", Distribution::Large, seedA ^ 0x1A26Eull, 0, 0, 1, true, 0 },
            { "outliers", Distribution::Outliers, seedA ^ 0x0D71E25ull, 0, 0, 1, true, 1 },
        };
        auto merged = [](const BufferMap& a, const BufferMap& b, const BufferMap& c) {
            BufferMap m = a;
            m.insert(b.begin(), b.end());
            m.insert(c.begin(), c.end());
            return m;
        };
        auto fillInputs = [&](int set, Distribution dist, std::uint64_t seed) {
            for (std::size_t ti = 0; ti < sizes.size(); ++ti) {
                const auto& t = sizes[ti];
                if (t.spec->role != TensorRole::Input || t.elements == 0)
                    continue;
                m_harness.fill(m_stream, inputs[set].at(t.spec->name), t.elements, t.spec->dtype, dist,
                    seed ^ (0x9E3779B97F4A7C15ull * (ti + 1)), t.spec->scale);
            }
        };
        auto prepareOutputs = [&](int set, int variant) {
            for (const auto& t : sizes)
                if (t.spec->role == TensorRole::Output && t.elements)
                    m_harness.poison(m_stream, outputs[set].at(t.spec->name), t.elements, t.spec->dtype,
                        HarnessKernels::poisonPattern(t.spec->dtype, variant));
            for (const auto& w : cb->workspaces())
                if (!w.zeroInit && w.bytes >= 4)
                    KL_CU(cuMemsetD32Async(
                        work.at(w.name), 0x7FA5C3E1u ^ static_cast<unsigned>(variant), w.bytes / 4, m_stream));
            m_harness.canaryFill(m_stream, guardRegions, kGuardBytes / 4);
        };
        auto hashInputs = [&](int set, CUdeviceptr slot) {
            for (std::size_t ti = 0; ti < sizes.size(); ++ti)
                if (sizes[ti].spec->role == TensorRole::Input)
                    m_harness.hash(
                        m_stream, inputs[set].at(sizes[ti].spec->name), sizes[ti].bytes, ti * 0x100000001ull, slot);
        };
        // Each reference output's sum of squares, once per reference run: refStats[refSet] + 8 * output index.
        CUdeviceptr refStats[2] = { 0, 0 };
        auto referenceStats = [&](int refSet, CUdeviceptr area) {
            int oi = 0;
            for (const auto& t : sizes)
                if (t.spec->role == TensorRole::Output && t.elements)
                    m_harness.sumSquares(
                        m_stream, refs[refSet].at(t.spec->name), t.elements, t.spec->dtype, area + 8 * oi++);
            refStats[refSet] = area;
        };
        auto compareOutputs = [&](int outSet, int refSet, int variant, CUdeviceptr checkSlots) {
            int oi = 0;
            for (const auto& t : sizes)
                if (t.spec->role == TensorRole::Output && t.elements)
                    m_harness.compare(m_stream, outputs[outSet].at(t.spec->name), refs[refSet].at(t.spec->name),
                        t.elements, t.spec->dtype, HarnessKernels::poisonPattern(t.spec->dtype, variant), checkSlots,
                        refStats[refSet] + 8 * oi++);
            m_harness.canaryCheck(m_stream, guardRegions, kGuardBytes / 4, checkSlots + kCanaryBad * 8);
        };

        bool launchFailed = false;
        std::string launchError;
        int checksRun = 0;
        for (std::size_t ci = 0; ci < checks.size(); ++ci) {
            const auto& c = checks[ci];
            const CUdeviceptr cs = slots + ci * kSlotCount * 8;
            fillInputs(c.inputSet, c.dist, c.seed);
            if (c.computeRef) {
                rb->run(m_stream, merged(inputs[c.inputSet], refs[c.refSet], refWork));
                referenceStats(c.refSet, refStatArea + ci * 8 * std::max(nOut, 1));
            }
            prepareOutputs(c.outputSet, c.poisonVariant);
            hashInputs(c.inputSet, cs + kHashBefore * 8);
            try {
                cb->run(m_stream, merged(inputs[c.inputSet], outputs[c.outputSet], work));
            } catch (const CudaError& e) {
                if (e.sticky())
                    throw;
                launchFailed = true;
                launchError = e.what();
                break;
            }
            hashInputs(c.inputSet, cs + kHashAfter * 8);
            compareOutputs(c.outputSet, c.refSet, c.poisonVariant, cs);
            ++checksRun;
        }

        // Graph safety: the whole plan captured into a CUDA graph and replayed on the A inputs.
        bool graphFailed = false;
        std::string graphError;
        const int graphCheck = 5;
        if (!launchFailed && o.graphCheck) {
            CUgraph graph = nullptr;
            CUgraphExec exec = nullptr;
            const bool wasActive = ledger.active;
            ledger.active = false;
            KL_CU(cuStreamSynchronize(m_stream));
            CUresult r = cuStreamBeginCapture(m_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
            if (r == CUDA_SUCCESS) {
                try {
                    cb->run(m_stream, merged(inputs[1], outputs[1], work));
                } catch (const CudaError& e) {
                    graphError = e.what();
                }
                const CUresult r2 = cuStreamEndCapture(m_stream, &graph);
                if (r2 != CUDA_SUCCESS && graphError.empty())
                    graphError = cuErrorText(r2);
                if (graphError.empty()) {
                    const CUresult r3 = cuGraphInstantiate(&exec, graph, 0);
                    if (r3 != CUDA_SUCCESS)
                        graphError = cuErrorText(r3);
                }
            } else {
                graphError = cuErrorText(r);
            }
            ledger.active = wasActive;
            if (!graphError.empty()) {
                graphFailed = true;
            } else {
                const CUdeviceptr cs = slots + graphCheck * kSlotCount * 8;
                prepareOutputs(1, 0);
                hashInputs(1, cs + kHashBefore * 8);
                KL_CU(cuGraphLaunch(exec, m_stream));
                // Kernels replayed from the graph show up in CUPTI too.
                if (ledger.active)
                    for (const auto& st : static_cast<const KernelBound*>(cb.get())->steps)
                        ledger.note(st.symbol, st.grid, st.block);
                hashInputs(1, cs + kHashAfter * 8);
                compareOutputs(1, 0, 0, cs);
            }
            if (exec)
                cuGraphExecDestroy(exec);
            if (graph)
                cuGraphDestroy(graph);
        }
        KL_CU(cuStreamSynchronize(m_stream));
        std::vector<std::uint64_t> host(nChecks * kSlotCount);
        KL_CU(cuMemcpyDtoH(host.data(), slots, host.size() * 8));

        DType outType = DType::F32;
        for (const auto& t : sizes)
            if (t.spec->role == TensorRole::Output) {
                outType = t.spec->dtype;
                break;
            }
        const Tolerance tol = p.toleranceFor(outType);
        bool firstPassed = false, laterFailed = false;
        auto evaluateCheck = [&](int ci, const std::string& name, std::uint64_t seed) {
            const std::uint64_t* s = &host[ci * kSlotCount];
            CorrectnessStats cs;
            double sd, sref;
            std::memcpy(&sd, &s[kSumSqDiff], 8);
            std::memcpy(&sref, &s[kSumSqRef], 8);
            float mx;
            const auto bits = static_cast<std::uint32_t>(s[kMaxErr]);
            std::memcpy(&mx, &bits, 4);
            cs.relL2 = sref > 0 ? std::sqrt(sd / sref) : std::sqrt(sd);
            cs.maxAbs = mx;
            cs.nonFinite = s[kNonFinite] != 0;
            cs.fullCoverage = s[kPoisonLeft] == 0;
            cs.canariesIntact = s[kCanaryBad] == 0;
            cs.inputsUnchanged = s[kHashBefore] == s[kHashAfter];
            cs.seed = seed;
            cs.distribution = name;
            cs.passed = !cs.nonFinite && cs.fullCoverage && cs.canariesIntact && cs.inputsUnchanged
                && cs.relL2 <= tol.relL2 && cs.maxAbs <= tol.maxAbs && std::isfinite(cs.relL2);
            if (!cs.inputsUnchanged)
                addReason(
                    out.reasons, reason("dynamic.input-modified", "the candidate changed its inputs on " + where));
            if (!cs.canariesIntact)
                addReason(out.reasons,
                    reason("dynamic.canary",
                        "the candidate wrote outside its output or workspace "
                        "buffers on "
                            + where + " (" + std::to_string(s[kCanaryBad]) + " guard words changed)"));
            if (!cs.fullCoverage)
                addReason(out.reasons,
                    reason("dynamic.coverage",
                        std::to_string(s[kPoisonLeft]) + " output elements were never written on " + where));
            if (cs.nonFinite)
                addReason(out.reasons,
                    reason("correctness.non-finite",
                        "NaN or Inf where the reference is finite on " + where + " (" + name + " inputs)"));
            if (cs.fullCoverage && !cs.nonFinite && (cs.relL2 > tol.relL2 || !std::isfinite(cs.relL2)))
                addReason(out.reasons,
                    reason("correctness.rel-l2",
                        "relative L2 error " + fmt(cs.relL2) + " > " + fmt(tol.relL2) + " on " + where + " (" + name
                            + " inputs)"));
            if (cs.fullCoverage && !cs.nonFinite && cs.maxAbs > tol.maxAbs)
                addReason(out.reasons,
                    reason("correctness.max-abs",
                        "max error " + fmt(cs.maxAbs) + " > " + fmt(tol.maxAbs) + " on " + where + " (" + name
                            + " inputs)"));
            sr.checks.push_back(cs);
            return cs.passed;
        };
        bool all = !launchFailed && !graphFailed;
        for (int ci = 0; ci < checksRun; ++ci) {
            const bool ok = evaluateCheck(ci, checks[ci].name, checks[ci].seed);
            if (ci == 0)
                firstPassed = ok;
            else if ((ci == 1 || ci == 2) && !ok)
                laterFailed = true;
            all = all && ok;
        }
        if (firstPassed && laterFailed)
            addReason(out.reasons,
                reason("dynamic.state-between-launches",
                    "correct on the first run but wrong on a later run with new values or new "
                    "buffer addresses (run order A, B, A') on "
                        + where));
        if (launchFailed)
            addReason(out.reasons, reason("launch.failed", "the launch failed on " + where + ": " + launchError));
        if (graphFailed)
            addReason(out.reasons,
                reason(
                    "graph.capture-failed", "the launch plan could not be captured into a CUDA graph: " + graphError));
        else if (!launchFailed && o.graphCheck) {
            const bool ok = evaluateCheck(graphCheck, "graph:replay", seedA);
            if (!ok)
                addReason(out.reasons,
                    reason("graph.capture-failed",
                        "the launch plan replayed from a CUDA graph gives "
                        "wrong results on "
                            + where));
            all = all && ok;
        }
        sr.correct = all;
        if (!all)
            (sr.heldOut ? anyHeldOutFailed : anyVisibleFailed) = true;
        out.shapes.push_back(std::move(sr));
    }
    if (anyHeldOutFailed)
        addReason(out.reasons,
            reason("dynamic.held-out-shape",
                anyVisibleFailed ? "also fails on held-out shapes drawn from the validity range"
                                 : "correct on the visible shapes but wrong on a held-out shape drawn from the "
                                   "validity range (shape withheld): special-casing shapes does not pass"));

    const double cuptiStart = nowSeconds();
    double harnessGpuMs = 0, candidateGpuMs = 0, referenceGpuMs = 0;
    std::map<std::string, double> harnessByKernel;
    if (cupti) {
        KL_CU(cuCtxSynchronize());
        ledger.active = false;
        auto records = CuptiKernelLog::instance().stop();
        out.kernelRecords = records.size();
        for (const auto& r : records) {
            const double ms = static_cast<double>(r.endNs - r.startNs) * 1e-6;
            if (r.name.rfind("kl_h_", 0) == 0) {
                harnessGpuMs += ms;
                harnessByKernel[r.name.substr(5)] += ms;
            } else if (candidateSymbols.count(r.name))
                candidateGpuMs += ms;
            else
                referenceGpuMs += ms;
        }
        out.cuptiChecked = true;
        // Compare as multisets of (symbol, grid, block): every kernel that ran must be one the harness launched.
        auto keyOf = [](const std::string& s, const int g[3], const int b[3]) {
            std::ostringstream k;
            k << s << "|" << g[0] << "," << g[1] << "," << g[2] << "|" << b[0] << "," << b[1] << "," << b[2];
            return k.str();
        };
        // The harness's own helpers (kl_h_*) are not part of any plan; candidates may not use that prefix.
        auto harnessKernel = [](const std::string& s) { return s.rfind("kl_h_", 0) == 0; };
        std::multiset<std::string> expected, actual;
        for (const auto& e : ledger.launched)
            if (!harnessKernel(e.symbol))
                expected.insert(keyOf(e.symbol, e.grid, e.block));
        bool deviceLaunched = false;
        for (const auto& r : records) {
            if (harnessKernel(r.name))
                continue;
            actual.insert(keyOf(r.name, r.grid, r.block));
            deviceLaunched = deviceLaunched || r.deviceLaunched;
        }
        if (expected != actual || deviceLaunched) {
            std::vector<std::string> extra, missing;
            std::set_difference(
                actual.begin(), actual.end(), expected.begin(), expected.end(), std::back_inserter(extra));
            std::set_difference(
                expected.begin(), expected.end(), actual.begin(), actual.end(), std::back_inserter(missing));
            std::string msg = "kernels that ran differ from the launch plan: " + std::to_string(extra.size())
                + " unexpected, " + std::to_string(missing.size()) + " missing";
            if (!extra.empty())
                msg += "; e.g. ran " + extra.front();
            if (!missing.empty())
                msg += "; e.g. planned " + missing.front();
            if (CuptiKernelLog::instance().dropped() == 0)
                addReason(out.reasons, reason("dynamic.kernel-mismatch", msg));
            else
                addReason(out.reasons, reason("harness.cupti-dropped", msg + " (CUPTI dropped records)", false));
        }
        ledger.launched.clear();
    }
    // Where a verification's time goes on the GPU (CUPTI's kernel durations): the harness's own kernels, the
    // reference (and anything else) and the candidate.
    std::fprintf(stderr,
        "[worker] verify %zu shapes: %.1f ms (CUPTI stop %.1f ms; GPU kernels: harness %.1f ms, reference "
        "%.1f ms, candidate %.1f ms;",
        o.shapes.size(), (nowSeconds() - verifyStart) * 1e3, (nowSeconds() - cuptiStart) * 1e3, harnessGpuMs,
        referenceGpuMs, candidateGpuMs);
    for (const auto& [name, ms] : harnessByKernel)
        std::fprintf(stderr, " %s %.1f", name.c_str(), ms);
    std::fprintf(stderr, ")\n");
    return out;
}

// ---------------------------------------------------------------------------------------------------------
// Timing

TimeOutcome Engine::time(const LoadedProblem& lp, const Plan& candidate, const TimeOptions& o)
{
    TimeOutcome out;
    const Problem& p = lp.problem;
    std::mt19937_64 rng(o.seed ^ 0x7157EEDull);
    for (std::size_t si = 0; si < o.shapes.size(); ++si) {
        const Shape& shape = o.shapes[si];
        ShapeTiming st;
        st.result.shape = shape;
        std::unique_ptr<BoundPlan> cb, bb, rb;
        try {
            cb = candidate.bind(p, shape);
        } catch (const LaunchConfigError& e) {
            addReason(out.reasons, reason("launch.invalid-config", e.what()));
            out.shapes.push_back(std::move(st));
            continue;
        }
        if (o.withBaseline)
            bb = lp.baseline->bind(p, shape);
        rb = lp.reference->bind(p, shape);
        const auto sizes = tensorSizes(p, shape);
        std::uint64_t ioBytes = 0, setBytes = 0;
        for (const auto& t : sizes) {
            ioBytes += t.bytes;
            setBytes += alignUp(t.bytes, kAlign) + kAlign * 64;
            if (t.spec->role == TensorRole::Output && bb)
                setBytes += alignUp(t.bytes, kAlign) + kAlign * 64;
        }
        for (const auto& w : cb->workspaces())
            setBytes += alignUp(w.bytes, kAlign) + kAlign * 64;
        if (bb)
            for (const auto& w : bb->workspaces())
                setBytes += alignUp(w.bytes, kAlign) + kAlign * 64;
        std::uint64_t refBytes = 0;
        for (const auto& t : sizes)
            if (t.spec->role == TensorRole::Output)
                refBytes += alignUp(t.bytes, kAlign) + kAlign * 64;
        for (const auto& w : rb->workspaces())
            refBytes += alignUp(w.bytes, kAlign) + kAlign * 64;
        // Cold caches: rotate through input sets whose total exceeds 2x L2, so no memset sits in the timed loop.
        const std::uint64_t l2x2 = 2 * static_cast<std::uint64_t>(m_device.l2Bytes);
        // At least 4 sets, each tensor of each set at its own random offset: a streaming kernel's speed depends on
        // where its buffers sit relative to each other (DRAM channel and bank conflicts, about 1-2% on the H200),
        // and a median over several placements repeats across requests where one placement per request did not.
        int sets = static_cast<int>(
            std::clamp<std::uint64_t>((l2x2 + ioBytes - 1) / std::max<std::uint64_t>(ioBytes, 1) + 1, 4, 2048));
        std::size_t freeMem = 0, totalMem = 0;
        cuMemGetInfo(&freeMem, &totalMem);
        const std::uint64_t budget = static_cast<std::uint64_t>(freeMem + m_arenaBytes) / 2;
        while (sets > 1 && static_cast<std::uint64_t>(sets) * setBytes + refBytes > budget)
            --sets;
        st.inputSets = sets;
        st.rotationBytes = static_cast<std::uint64_t>(sets) * ioBytes;
        arenaReserve(static_cast<std::uint64_t>(sets) * setBytes + refBytes + 16 * kSlotCount * 8 + 4096 * kAlign);
        arenaReset();
        // One slab per tensor holding every set, so filling or poisoning all sets is one launch each.
        std::vector<BufferMap> candSets(sets), baseSets(sets);
        auto setStride
            = [](std::uint64_t bytes) { return alignUp(std::max<std::uint64_t>(bytes, 4), kAlign) + 64 * kAlign; };
        auto placeSets = [&](CUdeviceptr slab, std::uint64_t stride) {
            std::vector<CUdeviceptr> at(static_cast<std::size_t>(sets));
            for (int k = 0; k < sets; ++k)
                at[static_cast<std::size_t>(k)] = slab + k * stride + (m_rng() % 64) * kAlign;
            return at;
        };
        const double setupStart = nowSeconds();
        for (std::size_t ti = 0; ti < sizes.size(); ++ti) {
            const auto& t = sizes[ti];
            const std::uint64_t stride = setStride(t.bytes);
            const CUdeviceptr slab = arenaAlloc(stride * sets);
            const std::uint64_t slabElems = stride * sets / dtypeBytes(t.spec->dtype);
            const auto at = placeSets(slab, stride);
            for (int k = 0; k < sets; ++k)
                candSets[k][t.spec->name] = at[k];
            if (t.spec->role == TensorRole::Input) {
                for (int k = 0; k < sets; ++k)
                    baseSets[k][t.spec->name] = at[k];
                m_harness.fill(m_stream, slab, slabElems, t.spec->dtype, Distribution::Normal,
                    o.seed ^ (0x9E3779B97F4A7C15ull * (ti + 1)), t.spec->scale);
            } else {
                m_harness.poison(
                    m_stream, slab, slabElems, t.spec->dtype, HarnessKernels::poisonPattern(t.spec->dtype, 0));
                if (bb) {
                    const auto bat = placeSets(arenaAlloc(stride * sets), stride);
                    for (int k = 0; k < sets; ++k)
                        baseSets[k][t.spec->name] = bat[k];
                }
            }
        }
        for (const auto& w : cb->workspaces()) {
            const auto at = placeSets(arenaAlloc(setStride(w.bytes) * sets), setStride(w.bytes));
            for (int k = 0; k < sets; ++k)
                candSets[k][w.name] = at[k];
        }
        if (bb)
            for (const auto& w : bb->workspaces()) {
                const auto at = placeSets(arenaAlloc(setStride(w.bytes) * sets), setStride(w.bytes));
                for (int k = 0; k < sets; ++k)
                    baseSets[k][w.name] = at[k];
            }
        BufferMap refOut;
        for (const auto& t : sizes)
            if (t.spec->role == TensorRole::Output)
                refOut[t.spec->name] = arenaAlloc(std::max<std::uint64_t>(t.bytes, 4));
        for (const auto& w : rb->workspaces())
            refOut[w.name] = arenaAlloc(std::max<std::uint64_t>(w.bytes, 4));
        const CUdeviceptr slots = arenaAlloc(16 * kSlotCount * 8);

        std::vector<CUevent> events;
        auto eventAt = [&](std::size_t i) {
            while (events.size() <= i) {
                CUevent e;
                KL_CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
                events.push_back(e);
            }
            return events[i];
        };
        auto elapsedUs = [&](std::size_t a, std::size_t b) {
            float ms = 0;
            KL_CU(cuEventElapsedTime(&ms, events[a], events[b]));
            return static_cast<double>(ms) * 1000.0;
        };
        std::vector<char> used(sets, 0);
        try {
            // Estimate, also the warm-up of module, caches of instruction memory and clocks.
            std::vector<double> estC, estB;
            for (int i = 0; i < 5; ++i) {
                KL_CU(cuEventRecord(eventAt(0), m_stream));
                cb->run(m_stream, candSets[i % sets]);
                used[i % sets] = 1;
                KL_CU(cuEventRecord(eventAt(1), m_stream));
                if (bb)
                    bb->run(m_stream, baseSets[i % sets]);
                KL_CU(cuEventRecord(eventAt(2), m_stream));
                KL_CU(cuEventSynchronize(eventAt(2)));
                if (i >= 2) {
                    estC.push_back(elapsedUs(0, 1));
                    estB.push_back(elapsedUs(1, 2));
                }
            }
            const double tC = percentile(estC, 0.5);
            const double tB = bb ? percentile(estB, 0.5) : tC;
            const bool graphMode
                = o.graphMode == "always" || (o.graphMode == "auto" && std::min(tC, tB) < o.graphThresholdUs);

            struct Timed {
                const BoundPlan* plan;
                std::vector<BufferMap>* bufs;
                std::vector<CUgraphExec> graphs;
                int perSample = 1;
                std::vector<double> samples;
                std::vector<std::vector<int>> graphSets; // the input sets each graph runs
            };
            // Only a launched graph writes its outputs; a captured one that never ran must not be re-checked.
            auto launchGraph = [&](Timed& t, std::size_t g) {
                KL_CU(cuGraphLaunch(t.graphs[g], m_stream));
                if (t.bufs == &candSets)
                    for (int k : t.graphSets[g])
                        used[k] = 1;
            };
            auto buildGraphs = [&](Timed& t, int perSample) {
                t.perSample = perSample;
                const int groups = std::min(32, (sets + perSample - 1) / perSample);
                for (int g = 0; g < groups; ++g) {
                    CUgraph graph = nullptr;
                    CUgraphExec exec = nullptr;
                    std::vector<int> setsOfGraph;
                    KL_CU(cuStreamBeginCapture(m_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
                    try {
                        for (int r = 0; r < perSample; ++r) {
                            const int k = (g * perSample + r) % sets;
                            t.plan->run(m_stream, (*t.bufs)[k]);
                            setsOfGraph.push_back(k);
                        }
                    } catch (...) {
                        cuStreamEndCapture(m_stream, &graph);
                        if (graph)
                            cuGraphDestroy(graph);
                        throw;
                    }
                    KL_CU(cuStreamEndCapture(m_stream, &graph));
                    KL_CU(cuGraphInstantiate(&exec, graph, 0));
                    cuGraphDestroy(graph);
                    t.graphs.push_back(exec);
                    t.graphSets.push_back(std::move(setsOfGraph));
                }
            };
            auto perSampleFor = [&](double us) {
                return std::clamp(static_cast<int>(std::ceil(200.0 / std::max(us, 0.5))), 1, 1000);
            };
            Timed cand { cb.get(), &candSets, {}, 1, {}, {} };
            Timed base { bb.get(), &baseSets, {}, 1, {}, {} };
            if (graphMode) {
                const int per = perSampleFor(std::min(tC, tB));
                buildGraphs(cand, per);
                if (bb)
                    buildGraphs(base, per);
            } else {
                // A few back-to-back launches per event pair: an event between every launch adds a launch bubble
                // (~2-3 us) that is not the kernel's time.
                const int per = std::clamp(static_cast<int>(std::ceil(300.0 / std::max(std::min(tC, tB), 1.0))), 1, 16);
                cand.perSample = per;
                base.perSample = per;
            }
            const double setupMs = (nowSeconds() - setupStart) * 1e3;
            int sampleIndex = 0;
            auto enqueue = [&](Timed& t, std::size_t e0) {
                // Candidate and baseline share the input sets; the baseline runs half a rotation behind so the
                // second of a pair never finds the inputs the first just pulled into L2.
                const bool isBase = &t == &base;
                KL_CU(cuEventRecord(eventAt(e0), m_stream));
                if (graphMode) {
                    const std::size_t g = t.graphs.size();
                    launchGraph(t, (sampleIndex + (isBase ? g / 2 : 0)) % g);
                } else {
                    for (int r = 0; r < t.perSample; ++r) {
                        const int k = (sampleIndex * t.perSample + r + (isBase ? sets / 2 : 0)) % sets;
                        t.plan->run(m_stream, (*t.bufs)[k]);
                        if (t.bufs == &candSets)
                            used[k] = 1;
                    }
                }
                KL_CU(cuEventRecord(eventAt(e0 + 1), m_stream));
            };
            // Warm-up at the sample rate, untimed.
            for (int i = 0; i < 3; ++i) {
                enqueue(cand, 0);
                if (bb)
                    enqueue(base, 2);
                ++sampleIndex;
            }
            KL_CU(cuStreamSynchronize(m_stream));
            st.before = m_nvml.latest();
            m_nvml.beginWindow();
            const double start = nowSeconds();
            const double pairUs = cand.perSample * (tC + (bb ? tB : 0));
            const int batch = std::clamp(static_cast<int>(std::ceil(5000.0 / std::max(pairUs, 1.0))), 4, 64);
            for (;;) {
                for (int b = 0; b < batch; ++b) {
                    // Alternate which goes first so neither always runs right after the other's cache state.
                    const std::size_t e = static_cast<std::size_t>(b) * 4;
                    if (bb && (sampleIndex & 1)) {
                        enqueue(base, e + 2);
                        enqueue(cand, e);
                    } else {
                        enqueue(cand, e);
                        if (bb)
                            enqueue(base, e + 2);
                    }
                    ++sampleIndex;
                }
                KL_CU(cuStreamSynchronize(m_stream));
                for (int b = 0; b < batch; ++b) {
                    const std::size_t e = static_cast<std::size_t>(b) * 4;
                    cand.samples.push_back(elapsedUs(e, e + 1) / cand.perSample);
                    if (bb)
                        base.samples.push_back(elapsedUs(e + 2, e + 3) / base.perSample);
                }
                const int n = static_cast<int>(cand.samples.size());
                if (n >= o.minSamples) {
                    const auto tc = summarize(cand.samples, graphMode, cand.perSample);
                    bool done = relativeHalfWidth(tc) <= o.targetRelHalfWidth;
                    if (bb)
                        done = done
                            && relativeHalfWidth(summarize(base.samples, graphMode, base.perSample))
                                <= o.targetRelHalfWidth;
                    if (done || n >= o.maxSamples || nowSeconds() - start > o.maxSecondsPerShape)
                        break;
                }
            }
            st.after = m_nvml.window();
            st.throttled = st.before.throttled() || st.after.throttled();
            const double measureMs = (nowSeconds() - start) * 1e3;
            const double tailStart = nowSeconds();
            st.result.timing = summarize(cand.samples, graphMode, cand.perSample);
            st.candidateSamplesUs = cand.samples;
            if (bb) {
                st.result.baselineTiming = summarize(base.samples, graphMode, base.perSample);
                st.baselineSamplesUs = base.samples;
                // Paired ratios: each candidate sample with the baseline sample taken next to it.
                std::vector<double> ratios;
                for (std::size_t i = 0; i < cand.samples.size() && i < base.samples.size(); ++i)
                    if (cand.samples[i] > 0)
                        ratios.push_back(base.samples[i] / cand.samples[i]);
                st.result.speedup = percentile(ratios, 0.5);
                medianConfidence(ratios, &st.result.speedupCiLow, &st.result.speedupCiHigh);
            }
            for (auto g : cand.graphs)
                cuGraphExecDestroy(g);
            for (auto g : base.graphs)
                cuGraphExecDestroy(g);

            // The whole plan under graph replay is part of the record, so turning graphs off never looks faster.
            if (graphMode) {
                st.result.graphTiming = st.result.timing;
            } else if (o.graphTiming) {
                Timed g { cb.get(), &candSets, {}, 1, {}, {} };
                try {
                    buildGraphs(g, perSampleFor(tC));
                    for (int i = 0; i < 12; ++i) {
                        KL_CU(cuEventRecord(eventAt(2 * i), m_stream));
                        launchGraph(g, i % g.graphs.size());
                        KL_CU(cuEventRecord(eventAt(2 * i + 1), m_stream));
                    }
                    KL_CU(cuStreamSynchronize(m_stream));
                    for (int i = 0; i < 12; ++i)
                        g.samples.push_back(elapsedUs(2 * i, 2 * i + 1) / g.perSample);
                    st.result.graphTiming = summarize(g.samples, true, g.perSample);
                } catch (const CudaError& e) {
                    if (e.sticky())
                        throw;
                    addReason(out.reasons, reason("graph.capture-failed", std::string("graph timing: ") + e.what()));
                }
                for (auto x : g.graphs)
                    cuGraphExecDestroy(x);
            }

            // Correctness re-checked on the outputs the timed runs wrote (phase-detecting kernels fail here).
            if (o.recheck) {
                std::vector<int> pool;
                for (int k = 0; k < sets; ++k)
                    if (used[k])
                        pool.push_back(k);
                std::shuffle(pool.begin(), pool.end(), rng);
                pool.resize(std::min<std::size_t>(pool.size(), 2));
                KL_CU(cuMemsetD8Async(slots, 0, 16 * kSlotCount * 8, m_stream));
                for (std::size_t j = 0; j < pool.size(); ++j) {
                    BufferMap rbufs = candSets[pool[j]];
                    for (const auto& [name, ptr] : refOut)
                        rbufs[name] = ptr;
                    rb->run(m_stream, rbufs);
                    const CUdeviceptr checkSlots = slots + j * kSlotCount * 8;
                    bool firstOutput = true;
                    for (const auto& t : sizes)
                        if (t.spec->role == TensorRole::Output && t.elements) {
                            // The stat word is per output: zero it again between outputs.
                            if (!std::exchange(firstOutput, false))
                                KL_CU(cuMemsetD32Async(checkSlots + kRefSumSq * 8, 0, 2, m_stream));
                            m_harness.sumSquares(m_stream, refOut.at(t.spec->name), t.elements, t.spec->dtype,
                                checkSlots + kRefSumSq * 8);
                            m_harness.compare(m_stream, candSets[pool[j]].at(t.spec->name), refOut.at(t.spec->name),
                                t.elements, t.spec->dtype, HarnessKernels::poisonPattern(t.spec->dtype, 0), checkSlots,
                                checkSlots + kRefSumSq * 8);
                        }
                }
                KL_CU(cuStreamSynchronize(m_stream));
                std::vector<std::uint64_t> host(16 * kSlotCount);
                KL_CU(cuMemcpyDtoH(host.data(), slots, host.size() * 8));
                DType outType = DType::F32;
                for (const auto& t : sizes)
                    if (t.spec->role == TensorRole::Output) {
                        outType = t.spec->dtype;
                        break;
                    }
                const Tolerance tol = p.toleranceFor(outType);
                bool allOk = true;
                for (std::size_t j = 0; j < pool.size(); ++j) {
                    const std::uint64_t* s = &host[j * kSlotCount];
                    CorrectnessStats cs;
                    double sd, sref;
                    std::memcpy(&sd, &s[kSumSqDiff], 8);
                    std::memcpy(&sref, &s[kSumSqRef], 8);
                    float mx;
                    const auto bits = static_cast<std::uint32_t>(s[kMaxErr]);
                    std::memcpy(&mx, &bits, 4);
                    cs.relL2 = sref > 0 ? std::sqrt(sd / sref) : std::sqrt(sd);
                    cs.maxAbs = mx;
                    cs.nonFinite = s[kNonFinite] != 0;
                    cs.fullCoverage = s[kPoisonLeft] == 0;
                    cs.distribution = "timed:" + std::to_string(pool[j]);
                    cs.seed = o.seed;
                    cs.passed = !cs.nonFinite && cs.fullCoverage && cs.relL2 <= tol.relL2 && cs.maxAbs <= tol.maxAbs;
                    allOk = allOk && cs.passed;
                    st.result.checks.push_back(cs);
                }
                st.result.correct = allOk;
                if (!allOk)
                    addReason(out.reasons,
                        reason("dynamic.timed-output-wrong",
                            "outputs written during the timed runs are wrong on shape " + shape.label()
                                + " although verification passed"));
            } else {
                st.result.correct = true;
            }
            std::fprintf(stderr,
                "[worker] time %s: sets %d %s x%d samples %d setup %.1f ms measure %.1f ms tail %.1f ms\n",
                shape.label().c_str(), sets, graphMode ? "graph" : "events", cand.perSample,
                static_cast<int>(cand.samples.size()), setupMs, measureMs, (nowSeconds() - tailStart) * 1e3);
        } catch (const CudaError& e) {
            for (auto ev : events)
                cuEventDestroy(ev);
            if (e.sticky())
                throw;
            addReason(out.reasons, reason("launch.failed", std::string("timing: ") + e.what()));
            out.shapes.push_back(std::move(st));
            continue;
        }
        for (auto ev : events)
            cuEventDestroy(ev);
        out.shapes.push_back(std::move(st));
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------------
// Trace: N launches with events and CUPTI kernel records, for timelines and the CUPTI agreement check.

TraceOutcome Engine::trace(const LoadedProblem& lp, const Plan& candidate, const Shape& s, int launches)
{
    TraceOutcome out;
    const Problem& p = lp.problem;
    auto cb = candidate.bind(p, s);
    const auto sizes = tensorSizes(p, s);
    std::uint64_t ioBytes = 0, setBytes = 0;
    for (const auto& t : sizes) {
        ioBytes += t.bytes;
        setBytes += alignUp(t.bytes, kAlign) + 64 * kAlign;
    }
    for (const auto& w : cb->workspaces())
        setBytes += alignUp(w.bytes, kAlign) + 64 * kAlign;
    const int sets = static_cast<int>(std::clamp<std::uint64_t>(
        2 * static_cast<std::uint64_t>(m_device.l2Bytes) / std::max<std::uint64_t>(ioBytes, 1) + 1, 2, 256));
    arenaReserve(static_cast<std::uint64_t>(sets) * setBytes + 4096 * kAlign);
    arenaReset();
    std::vector<BufferMap> bufs(sets);
    for (int k = 0; k < sets; ++k) {
        for (std::size_t ti = 0; ti < sizes.size(); ++ti) {
            const auto& t = sizes[ti];
            const CUdeviceptr ptr = arenaAlloc(std::max<std::uint64_t>(t.bytes, 4));
            bufs[k][t.spec->name] = ptr;
            if (t.elements)
                m_harness.fill(
                    m_stream, ptr, t.elements, t.spec->dtype, Distribution::Normal, 77 + k * 1000 + ti, t.spec->scale);
        }
        for (const auto& w : cb->workspaces())
            bufs[k][w.name] = arenaAlloc(std::max<std::uint64_t>(w.bytes, 4));
    }
    for (int i = 0; i < 3; ++i)
        cb->run(m_stream, bufs[i % sets]);
    KL_CU(cuCtxSynchronize());
    out.cuptiAvailable = CuptiKernelLog::instance().available();
    if (out.cuptiAvailable)
        CuptiKernelLog::instance().start();
    std::vector<CUevent> ev(2 * static_cast<std::size_t>(launches));
    for (auto& e : ev)
        KL_CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
    for (int i = 0; i < launches; ++i) {
        KL_CU(cuEventRecord(ev[2 * i], m_stream));
        cb->run(m_stream, bufs[i % sets]);
        KL_CU(cuEventRecord(ev[2 * i + 1], m_stream));
    }
    KL_CU(cuCtxSynchronize());
    for (int i = 0; i < launches; ++i) {
        float ms = 0;
        KL_CU(cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        out.eventUs.push_back(ms * 1000.0);
    }
    for (auto e : ev)
        cuEventDestroy(e);
    if (out.cuptiAvailable)
        out.records = CuptiKernelLog::instance().stop();
    return out;
}

} // namespace kl::worker
