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
        enum Kind { Ptr, I32, F32, TensorMap, NullPtr } kind = Ptr;
        std::string name;
        std::int32_t i = 0;
        float f = 0;
        std::size_t map = 0; // index into KernelBound::maps
    };

    struct BoundStep {
        CUfunction fn = nullptr;
        std::string symbol;
        unsigned grid[3] = { 1, 1, 1 };
        unsigned block[3] = { 1, 1, 1 };
        unsigned cluster[3] = { 1, 1, 1 };
        bool hasCluster = false;
        bool programmaticLaunch = false;
        unsigned smem = 0;
        std::vector<BoundArg> args;
    };

    CUtensorMapDataType tensorMapDataType(DType t)
    {
        switch (t) {
        case DType::F32:
            return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
        case DType::F16:
            return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
        case DType::BF16:
            return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        case DType::F64:
            return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
        case DType::I32:
            return CU_TENSOR_MAP_DATA_TYPE_INT32;
        case DType::I64:
            return CU_TENSOR_MAP_DATA_TYPE_INT64;
        case DType::U8:
        case DType::FP8E4M3:
            return CU_TENSOR_MAP_DATA_TYPE_UINT8;
        }
        return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    }

    // A declared tensor map at one shape; encoded once per buffer address it meets (each placement and rotation
    // set), the first time a launch of that buffer is recorded: in the untimed checks and graph captures, never
    // in a timed replay.
    struct BoundTensorMap {
        TensorMapSpec spec;
        TensorMapGeometry geometry;
        mutable std::map<CUdeviceptr, CUtensorMap> encoded;

        const CUtensorMap& forAddress(CUdeviceptr address) const
        {
            if (auto it = encoded.find(address); it != encoded.end())
                return it->second;
            if (const std::string why = tensorMapAddressProblem(spec, geometry, address); !why.empty())
                throw LaunchConfigError(why);
            const TensorMapGeometry& g = geometry;
            cuuint64_t dims[TensorMapSpec::kMaxRank], strides[TensorMapSpec::kMaxRank];
            cuuint32_t box[TensorMapSpec::kMaxRank], elementStrides[TensorMapSpec::kMaxRank];
            for (int d = 0; d < g.rank; ++d) {
                dims[d] = g.globalDim[d];
                box[d] = g.box[d];
                elementStrides[d] = g.elementStrides[d];
                if (d + 1 < g.rank)
                    strides[d] = g.globalStrideBytes[d];
            }
            // core/tensor_map.h's enums list CUDA's values in CUDA's order.
            CUtensorMap map;
            const CUresult r = cuTensorMapEncodeTiled(&map, tensorMapDataType(g.dtype), static_cast<cuuint32_t>(g.rank),
                reinterpret_cast<void*>(address), dims, strides, box, elementStrides,
                static_cast<CUtensorMapInterleave>(g.interleave), static_cast<CUtensorMapSwizzle>(g.swizzle),
                static_cast<CUtensorMapL2promotion>(g.l2Promotion),
                g.oobFill == TmaOobFill::Zero ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
                                              : CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);
            if (r != CUDA_SUCCESS)
                throw LaunchConfigError("line " + std::to_string(spec.line) + ": @kl:tensormap " + spec.name
                    + ": cuTensorMapEncodeTiled refused it (" + cuErrorText(r) + ")");
            return encoded.emplace(address, map).first->second;
        }
    };

    class KernelBound final : public BoundPlan {
    public:
        std::vector<BoundStep> steps;
        std::vector<WorkspaceNeed> ws;
        std::vector<BoundTensorMap> maps;

        void run(CUstream s, const BufferMap& buffers) const override
        {
            for (const auto& w : ws)
                if (w.zeroInit && w.bytes)
                    KL_CU(cuMemsetD8Async(buffers.at(w.name), 0, w.bytes, s));
            for (const auto& st : steps) {
                alignas(64) unsigned char storage[32][sizeof(CUtensorMap)];
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
                    case BoundArg::TensorMap: {
                        const BoundTensorMap& m = maps[a.map];
                        std::memcpy(&storage[i], &m.forAddress(buffers.at(m.spec.tensor)), sizeof(CUtensorMap));
                        break;
                    }
                    case BoundArg::NullPtr:
                        std::memset(&storage[i], 0, sizeof(CUdeviceptr));
                        break;
                    }
                    argv[i] = &storage[i];
                }
                launchLedger().note(st.symbol, st.grid, st.block);
                launch(st, s, argv);
            }
        }
        static void launch(const BoundStep& st, CUstream s, void** argv)
        {
            if (!st.hasCluster && !st.programmaticLaunch) {
                KL_CU(cuLaunchKernel(st.fn, st.grid[0], st.grid[1], st.grid[2], st.block[0], st.block[1], st.block[2],
                    st.smem, s, argv, nullptr));
                return;
            }
            CUlaunchAttribute attrs[2];
            CUlaunchConfig config = launchConfig(st, s, attrs);
            KL_CU(cuLaunchKernelEx(&config, st.fn, argv, nullptr));
        }
        static CUlaunchConfig launchConfig(const BoundStep& st, CUstream s, CUlaunchAttribute (&attrs)[2])
        {
            CUlaunchConfig c {};
            c.gridDimX = st.grid[0];
            c.gridDimY = st.grid[1];
            c.gridDimZ = st.grid[2];
            c.blockDimX = st.block[0];
            c.blockDimY = st.block[1];
            c.blockDimZ = st.block[2];
            c.sharedMemBytes = st.smem;
            c.hStream = s;
            c.attrs = attrs;
            c.numAttrs = 0;
            if (st.hasCluster) {
                CUlaunchAttribute& a = attrs[c.numAttrs++];
                a = {};
                a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
                a.value.clusterDim.x = st.cluster[0];
                a.value.clusterDim.y = st.cluster[1];
                a.value.clusterDim.z = st.cluster[2];
            }
            if (st.programmaticLaunch) {
                CUlaunchAttribute& a = attrs[c.numAttrs++];
                a = {};
                a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
                a.value.programmaticStreamSerializationAllowed = 1;
            }
            return c;
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
            const DeviceInfo& dev, std::string label, std::map<std::string, KernelAbi> abi = {})
            : m_module(mod)
            , m_abi(std::move(abi))
            , m_context(currentContext())
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
            if (m_module && m_context && cuCtxPushCurrent(m_context) == CUDA_SUCCESS) {
                cuModuleUnload(m_module);
                CUcontext previous = nullptr;
                cuCtxPopCurrent(&previous);
            }
        }
        static CUcontext currentContext()
        {
            CUcontext c = nullptr;
            cuCtxGetCurrent(&c);
            return c;
        }
        std::string label() const override { return m_label; }

        std::unique_ptr<BoundPlan> bind(const Problem& p, const Shape& s) const override
        {
            auto b = std::make_unique<KernelBound>();
            const Bindings dims = s.bindings();
            std::string why;
            if (!m_spec.satisfies(m_params, dims, &why))
                throw LaunchConfigError(m_label + ": " + why + " for shape " + s.label());
            Bindings vars = bindingsFor(m_params, dims);
            vars[kSmCountIdentifier] = m_dev.smCount;
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
                const auto abi = m_abi.find(step.kernel);
                const std::int64_t smem = evalInt(step.sharedBytes, "smem", step.line)
                    + (abi != m_abi.end() ? abi->second.dynamicSharedBytes : 0);
                if (smem < 0 || smem + fn.staticSmem > m_dev.sharedPerBlockOptin)
                    throw LaunchConfigError(m_label + " line " + std::to_string(step.line) + ": " + std::to_string(smem)
                        + " bytes of dynamic shared memory exceed the device limit of "
                        + std::to_string(m_dev.sharedPerBlockOptin - fn.staticSmem));
                st.smem = static_cast<unsigned>(smem);
                if (smem > 48 * 1024)
                    KL_CU(cuFuncSetAttribute(
                        fn.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)));
                bindLaunchAttributes(step, st, evalInt, s);
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
                    } else if (const ScalarSpec* sc = p.scalar(a)) {
                        double value = 0;
                        try {
                            value = sc->valueAt(dims);
                        } catch (const ExprError& e) {
                            throw LaunchConfigError("scalar " + a + " at " + s.label() + ": " + e.what());
                        }
                        if (sc->dtype == DType::I32) {
                            arg.kind = BoundArg::I32;
                            arg.i = static_cast<std::int32_t>(value);
                        } else {
                            arg.kind = BoundArg::F32;
                            arg.f = static_cast<float>(value);
                        }
                    } else if (m_params.count(a)) {
                        arg.kind = BoundArg::I32;
                        arg.i = static_cast<std::int32_t>(m_params.at(a));
                    } else if (const TensorMapSpec* map = m_spec.tensorMap(a)) {
                        arg.kind = BoundArg::TensorMap;
                        arg.map = boundMap(*b, *map, p, vars, s);
                    } else {
                        throw LaunchConfigError(m_label + " line " + std::to_string(step.line) + ": kernel argument '"
                            + a + "' is not a tensor, workspace, dim, scalar or parameter of " + p.name);
                    }
                    st.args.push_back(arg);
                }
                if (abi != m_abi.end())
                    for (int i = 0; i < abi->second.trailingNullPointers; ++i)
                        st.args.push_back({ BoundArg::NullPtr, "(scratch)" });
                if (st.args.size() > 32)
                    throw LaunchConfigError(m_label + ": more than 32 kernel arguments");
                b->steps.push_back(std::move(st));
            }
            return b;
        }

    private:
        template <class EvalInt>
        void bindLaunchAttributes(const LaunchStep& step, BoundStep& st, const EvalInt& evalInt, const Shape& s) const
        {
            const std::string where = m_label + " line " + std::to_string(step.line) + ": ";
            if ((step.hasCluster || step.programmaticLaunch) && m_dev.ccMajor < 9)
                throw LaunchConfigError(where + "clusters and programmatic dependent launch need sm_90 or newer; this "
                    + "device is " + m_dev.arch);
            st.programmaticLaunch = step.programmaticLaunch;
            if (!step.hasCluster)
                return;
            std::int64_t grid[3], cluster[3];
            for (int d = 0; d < 3; ++d) {
                grid[d] = st.grid[d];
                cluster[d] = evalInt(step.cluster[d], "cluster", step.line);
            }
            if (const std::string why = clusterProblem(grid, cluster); !why.empty())
                throw LaunchConfigError(where + why + " for shape " + s.label());
            st.hasCluster = true;
            for (int d = 0; d < 3; ++d)
                st.cluster[d] = static_cast<unsigned>(cluster[d]);
            // A cluster whose blocks cannot be resident together (shared memory, registers) never starts.
            CUlaunchAttribute attrs[2];
            CUlaunchConfig config = KernelBound::launchConfig(st, nullptr, attrs);
            int clusters = 0;
            KL_CU(cuOccupancyMaxActiveClusters(&clusters, st.fn, &config));
            if (clusters < 1)
                throw LaunchConfigError(where + "no cluster of " + std::to_string(cluster[0] * cluster[1] * cluster[2])
                    + " blocks with " + std::to_string(st.smem) + " bytes of shared memory each fits the device");
        }

        std::size_t boundMap(
            KernelBound& b, const TensorMapSpec& map, const Problem& p, const Bindings& vars, const Shape& s) const
        {
            for (std::size_t i = 0; i < b.maps.size(); ++i)
                if (b.maps[i].spec.name == map.name)
                    return i;
            BoundTensorMap bm;
            bm.spec = map;
            try {
                bm.geometry = resolveTensorMap(map, p, vars);
            } catch (const InputError& e) {
                throw LaunchConfigError(m_label + " " + e.what() + " for shape " + s.label());
            }
            b.maps.push_back(std::move(bm));
            return b.maps.size() - 1;
        }

        struct Fn {
            CUfunction fn = nullptr;
            std::string symbol;
            int maxThreads = 1024;
            int staticSmem = 0;
        };
        CUmodule m_module;
        std::map<std::string, KernelAbi> m_abi;
        CUcontext m_context; // the module's, current when it is unloaded
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
    return std::make_shared<KernelPlan>(mod, std::move(spec), params, m->loweredNames, m_device, name);
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
        plan = std::make_shared<KernelPlan>(
            mod, std::move(ks), spec.params, spec.lowered, m_device, "candidate", spec.abi);
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

    // What the compare kernel accumulated for one output.
    struct OutputError {
        double relL2 = 0;
        double maxAbs = 0;
        bool nonFinite = false;
        std::uint64_t poisonLeft = 0;
    };

    OutputError readOutputError(const std::uint64_t* s)
    {
        OutputError e;
        double sd, sref;
        std::memcpy(&sd, &s[kSumSqDiff], 8);
        std::memcpy(&sref, &s[kSumSqRef], 8);
        float mx;
        const auto bits = static_cast<std::uint32_t>(s[kMaxErr]);
        std::memcpy(&mx, &bits, 4);
        e.relL2 = sref > 0 ? std::sqrt(sd / sref) : std::sqrt(sd);
        e.maxAbs = mx;
        e.nonFinite = s[kNonFinite] != 0;
        e.poisonLeft = s[kPoisonLeft];
        return e;
    }

    // One check judged output by output, each against its own tolerance: the CorrectnessStats carries the worst
    // output (by error over tolerance) and passes only when every output does; the reasons name the output.
    struct OutputJudgement {
        CorrectnessStats stats;
        std::string worstOutput;
        std::vector<std::pair<std::string, std::string>> failures; // (rule, detail), first per rule
    };

    OutputJudgement judgeOutputs(const std::vector<std::string>& names, const std::vector<OutputError>& errors,
        const std::vector<Tolerance>& tolerances)
    {
        OutputJudgement j;
        j.stats.fullCoverage = true;
        double worst = -1;
        bool allPass = true;
        for (std::size_t i = 0; i < names.size(); ++i) {
            const OutputError& e = errors[i];
            const Tolerance& t = tolerances[i];
            const double ratio = std::max(e.relL2 / std::max(t.relL2, 1e-300), e.maxAbs / std::max(t.maxAbs, 1e-300));
            const bool finite = std::isfinite(e.relL2);
            if (ratio > worst || !finite) {
                worst = finite ? ratio : INFINITY;
                j.stats.relL2 = e.relL2;
                j.stats.maxAbs = e.maxAbs;
                j.worstOutput = names[i];
            }
            j.stats.nonFinite = j.stats.nonFinite || e.nonFinite;
            j.stats.fullCoverage = j.stats.fullCoverage && e.poisonLeft == 0;
            auto fail = [&](const char* rule, const std::string& detail) {
                allPass = false;
                for (const auto& f : j.failures)
                    if (f.first == rule)
                        return;
                j.failures.emplace_back(rule, detail);
            };
            if (e.poisonLeft)
                fail("dynamic.coverage",
                    std::to_string(e.poisonLeft) + " elements of output '" + names[i] + "' were never written");
            if (e.nonFinite)
                fail("correctness.non-finite", "NaN or Inf in output '" + names[i] + "' where the reference is finite");
            if (!e.poisonLeft && !e.nonFinite && (e.relL2 > t.relL2 || !finite))
                fail("correctness.rel-l2",
                    "relative L2 error " + fmt(e.relL2) + " > " + fmt(t.relL2) + " in output '" + names[i] + "'");
            if (!e.poisonLeft && !e.nonFinite && e.maxAbs > t.maxAbs)
                fail("correctness.max-abs",
                    "max error " + fmt(e.maxAbs) + " > " + fmt(t.maxAbs) + " in output '" + names[i] + "'");
        }
        j.stats.passed = allPass;
        return j;
    }

    // A candidate buffer slab: one tensor's or workspace's buffers for every set.
    struct CandidateSlab {
        std::string name;
        SlabLayout layout;
        CUdeviceptr base = 0;
        std::uint64_t elements = 0;
        DType dtype = DType::U8;
        TensorRole role = TensorRole::Input;
        bool workspace = false;
        bool zeroInit = false;
        CUdeviceptr buffer(int set) const { return base + layout.bufferOffset(set); }
    };

    constexpr std::uint32_t kWorkspacePoison = 0x7FA5C3E1u;

} // namespace

std::vector<Tolerance> Engine::outputTolerances(const LoadedProblem& lp, const std::vector<std::string>& names) const
{
    std::vector<Tolerance> out;
    for (const auto& n : names) {
        auto it = lp.tolerances.find(n);
        const TensorSpec* t = lp.problem.tensor(n);
        out.push_back(
            it != lp.tolerances.end() ? it->second.tolerance : lp.problem.toleranceFor(t ? t->dtype : DType::F32));
    }
    return out;
}

void Engine::calibrateTolerances(LoadedProblem& lp)
{
    const Problem& p = lp.problem;
    for (const auto& t : p.tensors)
        if (t.role == TensorRole::Output) {
            OutputTolerance ot;
            ot.dtype = t.dtype;
            ot.stated = p.toleranceFor(t.dtype);
            ot.tolerance = ot.stated;
            lp.tolerances[t.name] = ot;
        }
    // Calibration inputs: the visible verify shapes that stay small, every value distribution the checks use.
    std::vector<Shape> shapes;
    for (const auto& s : p.verifyShapes) {
        std::uint64_t bytes = 0;
        for (const auto& t : tensorSizes(p, s))
            bytes += t.bytes;
        if (bytes <= (256ull << 20))
            shapes.push_back(s);
    }
    if (shapes.empty() && !p.verifyShapes.empty())
        shapes.push_back(p.verifyShapes.front());
    std::map<std::string, double> relL2, maxAbs;
    std::uint64_t seed = 0xCA11B8A7Eull;
    for (const auto& shape : shapes) {
        std::unique_ptr<BoundPlan> r64, r32;
        try {
            r64 = lp.reference->bind(p, shape);
            r32 = lp.referenceFp32->bind(p, shape);
        } catch (const LaunchConfigError&) {
            continue;
        }
        const auto sizes = tensorSizes(p, shape);
        std::uint64_t need = 64 * kSlotCount * 8;
        for (const auto& t : sizes)
            need += (t.spec->role == TensorRole::Output ? 2 : 1)
                * (alignUp(std::max<std::uint64_t>(t.bytes, 4), kAlign));
        for (const auto* b : { r64.get(), r32.get() })
            for (const auto& w : b->workspaces())
                need += alignUp(std::max<std::uint64_t>(w.bytes, 4), kAlign);
        m_hmem.reset(need, m_hstream);
        const int nOut = static_cast<int>(lp.tolerances.size());
        const CUdeviceptr slots = m_hmem.alloc(3 * static_cast<std::uint64_t>(nOut) * kSlotCount * 8);
        KL_CU(cuMemsetD8Async(slots, 0, 3 * static_cast<std::uint64_t>(nOut) * kSlotCount * 8, m_hstream));
        BufferMap in, out64, out32, w64, w32;
        for (const auto& t : sizes) {
            if (t.spec->role == TensorRole::Input) {
                in[t.spec->name] = m_hmem.alloc(std::max<std::uint64_t>(t.bytes, 4));
            } else {
                out64[t.spec->name] = m_hmem.alloc(std::max<std::uint64_t>(t.bytes, 4));
                out32[t.spec->name] = m_hmem.alloc(std::max<std::uint64_t>(t.bytes, 4));
            }
        }
        for (const auto& w : r64->workspaces())
            w64[w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
        for (const auto& w : r32->workspaces())
            w32[w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
        const Distribution dists[3] = { Distribution::Normal, Distribution::Large, Distribution::Outliers };
        for (int d = 0; d < 3; ++d) {
            for (std::size_t ti = 0; ti < sizes.size(); ++ti)
                if (sizes[ti].spec->role == TensorRole::Input && sizes[ti].elements)
                    m_harness.fillInput(m_hstream, in.at(sizes[ti].spec->name), *sizes[ti].spec, shape,
                        sizes[ti].elements, dists[d], seed ^ (0x9E3779B97F4A7C15ull * (ti + 1)));
            BufferMap a = in, b = in;
            a.insert(out64.begin(), out64.end());
            a.insert(w64.begin(), w64.end());
            b.insert(out32.begin(), out32.end());
            b.insert(w32.begin(), w32.end());
            r64->run(m_hstream, a);
            r32->run(m_hstream, b);
            int oi = 0;
            for (const auto& t : sizes) {
                if (t.spec->role != TensorRole::Output)
                    continue;
                const CUdeviceptr sl = slots + (static_cast<std::uint64_t>(d) * nOut + oi++) * kSlotCount * 8;
                if (!t.elements)
                    continue;
                m_harness.sumSquares(m_hstream, out64.at(t.spec->name), t.elements, t.spec->dtype, sl + kRefSumSq * 8);
                m_harness.compare(m_hstream, out32.at(t.spec->name), out64.at(t.spec->name), t.elements, t.spec->dtype,
                    HarnessKernels::poisonPattern(t.spec->dtype, 0), sl, sl + kRefSumSq * 8);
            }
        }
        std::vector<std::uint64_t> host(3 * static_cast<std::size_t>(nOut) * kSlotCount);
        KL_CU(cuStreamSynchronize(m_hstream));
        KL_CU(cuMemcpyDtoH(host.data(), slots, host.size() * 8));
        for (int d = 0; d < 3; ++d) {
            int oi = 0;
            for (const auto& t : sizes) {
                if (t.spec->role != TensorRole::Output)
                    continue;
                const OutputError e = readOutputError(&host[(static_cast<std::size_t>(d) * nOut + oi++) * kSlotCount]);
                const bool bad = e.nonFinite || e.poisonLeft;
                relL2[t.spec->name] = std::max(relL2[t.spec->name], bad ? INFINITY : e.relL2);
                maxAbs[t.spec->name] = std::max(maxAbs[t.spec->name], bad ? INFINITY : e.maxAbs);
            }
        }
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    }
    for (auto& [name, ot] : lp.tolerances) {
        if (!relL2.count(name))
            continue; // no calibration shape ran: the stated tolerance stands
        ot.measuredRelL2 = relL2[name];
        ot.measuredMaxAbs = maxAbs[name];
        ot.tolerance = measuredTolerance(ot.dtype, ot.stated, ot.measuredRelL2, ot.measuredMaxAbs);
        std::fprintf(stderr,
            "[worker] %s output %s: fp32 reference vs fp64 rel_l2 %.3g max %.3g -> tolerance %.3g / %.3g\n",
            p.name.c_str(), name.c_str(), ot.measuredRelL2, ot.measuredMaxAbs, ot.tolerance.relL2, ot.tolerance.maxAbs);
    }
}

VerifyOutcome Engine::verify(const LoadedProblem& lp, const Plan& candidate, const VerifyOptions& o)
{
    VerifyOutcome out;
    const double verifyStart = nowSeconds();
    const Problem& p = lp.problem;
    auto& ledger = launchLedger();
    const bool cupti = o.cupti && CuptiKernelLog::instance().available();
    if (cupti) {
        KL_CU(cuStreamSynchronize(m_stream));
        KL_CU(cuStreamSynchronize(m_hstream));
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
        // Candidate side: every tensor and workspace a slab of two sets (P/P', Q/Q') behind unmapped guards.
        std::vector<CandidateSlab> slabs;
        std::uint64_t candBytes = 2 * m_cand.granularity();
        for (const auto& t : sizes) {
            CandidateSlab cs;
            cs.name = t.spec->name;
            cs.layout = planSlab(t.bytes, 2, m_cand.granularity(), m_rng);
            cs.elements = t.elements;
            cs.dtype = t.spec->dtype;
            cs.role = t.spec->role;
            candBytes += cs.layout.mappedBytes;
            slabs.push_back(std::move(cs));
        }
        for (const auto& w : cb->workspaces()) {
            CandidateSlab cs;
            cs.name = w.name;
            cs.layout = planSlab(w.bytes, 2, m_cand.granularity(), m_rng);
            cs.elements = w.bytes / 4;
            cs.dtype = DType::I32;
            cs.workspace = true;
            cs.zeroInit = w.zeroInit;
            candBytes += cs.layout.mappedBytes;
            slabs.push_back(std::move(cs));
        }
        KL_CU(cuStreamSynchronize(m_stream));
        m_cand.reset(candBytes);
        for (auto& cs : slabs)
            cs.base = mapSlab(cs.layout);
        // Integrity words the harness's kernels write in the candidate arena after the candidate ran; each is
        // zeroed right before and copied to the harness's slots right after, so nothing the candidate left counts.
        const CUdeviceptr scratch = m_cand.map(m_cand.granularity());
        BufferMap inputs[2], outputs[2], work[2];
        std::vector<std::string> outputNames;
        for (const auto& cs : slabs)
            for (int set = 0; set < 2; ++set)
                (cs.workspace ? work : cs.role == TensorRole::Input ? inputs : outputs)[set][cs.name] = cs.buffer(set);
        for (const auto& t : sizes)
            if (t.spec->role == TensorRole::Output)
                outputNames.push_back(t.spec->name);
        const int nOut = std::max<int>(1, static_cast<int>(outputNames.size()));
        const std::vector<Tolerance> tolerances = outputTolerances(lp, outputNames);

        // Harness side: pristine inputs, reference outputs, copies of the candidate's outputs, slots.
        const int nChecks = 6;
        const std::uint64_t slotBytes = static_cast<std::uint64_t>(nChecks) * nOut * kSlotCount * 8;
        const std::uint64_t refStatBytes = static_cast<std::uint64_t>(nChecks) * 8 * nOut;
        std::uint64_t hBytes = slotBytes + refStatBytes + 16 * kAlign;
        for (const auto& t : sizes)
            hBytes += (t.spec->role == TensorRole::Input ? 1 : 2)
                * (alignUp(std::max<std::uint64_t>(t.bytes, 4), kAlign) + kAlign);
        for (const auto& w : rb->workspaces())
            hBytes += alignUp(std::max<std::uint64_t>(w.bytes, 4), kAlign) + kAlign;
        BufferMap hInputs, refs[2], refWork;
        CUdeviceptr slots = 0, refStatArea = 0;
        {
            m_hmem.reset(hBytes, m_hstream);
            slots = m_hmem.alloc(slotBytes + refStatBytes);
            refStatArea = slots + slotBytes;
            KL_CU(cuMemsetD8Async(slots, 0, slotBytes + refStatBytes, m_hstream));
            for (const auto& t : sizes) {
                const std::uint64_t b = std::max<std::uint64_t>(t.bytes, 4);
                if (t.spec->role == TensorRole::Input) {
                    hInputs[t.spec->name] = m_hmem.alloc(b);
                } else {
                    refs[0][t.spec->name] = m_hmem.alloc(b);
                    refs[1][t.spec->name] = m_hmem.alloc(b);
                }
            }
            for (const auto& w : rb->workspaces())
                refWork[w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
        }
        auto slotOf = [&](int check, int output) {
            return slots + (static_cast<std::uint64_t>(check) * nOut + output) * kSlotCount * 8;
        };

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
        // The same counter-based values in the candidate's buffers and the harness's pristine copy.
        auto fillInputs = [&](int set, Distribution dist, std::uint64_t seed, bool harnessToo) {
            for (std::size_t ti = 0; ti < sizes.size(); ++ti) {
                const auto& t = sizes[ti];
                if (t.spec->role != TensorRole::Input || t.elements == 0)
                    continue;
                const std::uint64_t s = seed ^ (0x9E3779B97F4A7C15ull * (ti + 1));
                m_harness.fillInput(m_stream, inputs[set].at(t.spec->name), *t.spec, shape, t.elements, dist, s);
                if (harnessToo)
                    m_harness.fillInput(m_hstream, hInputs.at(t.spec->name), *t.spec, shape, t.elements, dist, s);
            }
        };
        // Before every candidate launch: outputs poisoned, workspaces poisoned (or zeroed by the plan), every
        // canary of every slab written again.
        auto prepareLaunch = [&](int set, int variant) {
            for (const auto& cs : slabs) {
                if (cs.role == TensorRole::Output && !cs.workspace && cs.elements)
                    m_harness.poison(m_stream, cs.buffer(set), cs.elements, cs.dtype,
                        HarnessKernels::poisonPattern(cs.dtype, variant));
                if (cs.workspace && !cs.zeroInit && cs.elements)
                    m_harness.poison(m_stream, cs.buffer(set), cs.elements, DType::I32,
                        kWorkspacePoison ^ static_cast<unsigned>(variant));
                m_harness.slabCanaryFill(m_stream, cs.base, cs.layout);
            }
        };
        auto hashInputs = [&](int set, int word) {
            KL_CU(cuMemsetD8Async(scratch + word * 8, 0, 8, m_stream));
            for (std::size_t ti = 0; ti < sizes.size(); ++ti)
                if (sizes[ti].spec->role == TensorRole::Input)
                    m_harness.hash(m_stream, inputs[set].at(sizes[ti].spec->name), sizes[ti].bytes, ti * 0x100000001ull,
                        scratch + word * 8);
        };
        auto toHarness = [&](CUdeviceptr dst, CUdeviceptr src, std::uint64_t bytes) {
            KL_CU(cuMemcpyDtoDAsync(dst, src, bytes, m_stream));
        };
        // Each reference output's sum of squares, once per reference run: refStats[refSet] + 8 * output index.
        CUdeviceptr refStats[2] = { 0, 0 };
        auto runReference = [&](int refSet, CUdeviceptr area) {
            rb->run(m_hstream, merged(hInputs, refs[refSet], refWork));
            int oi = 0;
            for (const auto& t : sizes)
                if (t.spec->role == TensorRole::Output) {
                    if (t.elements)
                        m_harness.sumSquares(
                            m_hstream, refs[refSet].at(t.spec->name), t.elements, t.spec->dtype, area + 8 * oi);
                    ++oi;
                }
            refStats[refSet] = area;
        };
        // After the candidate: integrity words into the harness's slots, then its outputs compared where they are
        // (the candidate has finished; nothing it can run sees the reference or the slots).
        auto judgeLaunch = [&](int check, int set, int outSet, int refSet, int variant) {
            hashInputs(set, 1);
            KL_CU(cuMemsetD8Async(scratch + 16, 0, 8, m_stream));
            for (const auto& cs : slabs)
                m_harness.slabCanaryCheck(m_stream, cs.base, cs.layout, scratch + 16);
            toHarness(slotOf(check, 0) + kHashAfter * 8, scratch + 8, 8);
            toHarness(slotOf(check, 0) + kCanaryBad * 8, scratch + 16, 8);
            handoff(m_stream, m_hstream);
            int oi = 0;
            for (const auto& t : sizes)
                if (t.spec->role == TensorRole::Output) {
                    if (t.elements)
                        m_harness.compare(m_hstream, outputs[outSet].at(t.spec->name), refs[refSet].at(t.spec->name),
                            t.elements, t.spec->dtype, HarnessKernels::poisonPattern(t.spec->dtype, variant),
                            slotOf(check, oi), refStats[refSet] + 8 * oi);
                    ++oi;
                }
            // The next launch re-poisons these outputs: it waits until the compare has read them.
            handoff(m_hstream, m_stream);
        };

        bool launchFailed = false;
        std::string launchError;
        int checksRun = 0;
        for (std::size_t ci = 0; ci < checks.size(); ++ci) {
            const auto& c = checks[ci];
            fillInputs(c.inputSet, c.dist, c.seed, c.computeRef);
            if (c.computeRef)
                runReference(c.refSet, refStatArea + ci * 8 * nOut);
            prepareLaunch(c.outputSet, c.poisonVariant);
            hashInputs(c.inputSet, 0);
            toHarness(slotOf(static_cast<int>(ci), 0) + kHashBefore * 8, scratch, 8);
            try {
                cb->run(m_stream, merged(inputs[c.inputSet], outputs[c.outputSet], work[c.outputSet]));
            } catch (const CudaError& e) {
                if (e.sticky())
                    throw;
                launchFailed = true;
                launchError = e.what();
                break;
            }
            judgeLaunch(static_cast<int>(ci), c.inputSet, c.outputSet, c.refSet, c.poisonVariant);
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
                    cb->run(m_stream, merged(inputs[1], outputs[1], work[1]));
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
                prepareLaunch(1, 0);
                hashInputs(1, 0);
                toHarness(slotOf(graphCheck, 0) + kHashBefore * 8, scratch, 8);
                KL_CU(cuGraphLaunch(exec, m_stream));
                // Kernels replayed from the graph show up in CUPTI too.
                if (ledger.active)
                    for (const auto& st : static_cast<const KernelBound*>(cb.get())->steps)
                        ledger.note(st.symbol, st.grid, st.block);
                judgeLaunch(graphCheck, 1, 1, 0, 0);
            }
            if (exec)
                cuGraphExecDestroy(exec);
            if (graph)
                cuGraphDestroy(graph);
        }
        KL_CU(cuStreamSynchronize(m_stream));
        KL_CU(cuStreamSynchronize(m_hstream));
        std::vector<std::uint64_t> host(static_cast<std::size_t>(nChecks) * nOut * kSlotCount);
        {
            KL_CU(cuMemcpyDtoH(host.data(), slots, host.size() * 8));
        }

        bool firstPassed = false, laterFailed = false;
        auto evaluateCheck = [&](int ci, const std::string& name, std::uint64_t seed) {
            const std::uint64_t* s = &host[static_cast<std::size_t>(ci) * nOut * kSlotCount];
            std::vector<OutputError> errors;
            for (int oi = 0; oi < static_cast<int>(outputNames.size()); ++oi)
                errors.push_back(readOutputError(s + static_cast<std::size_t>(oi) * kSlotCount));
            OutputJudgement j = judgeOutputs(outputNames, errors, tolerances);
            CorrectnessStats& cs = j.stats;
            cs.canariesIntact = s[kCanaryBad] == 0;
            cs.inputsUnchanged = s[kHashBefore] == s[kHashAfter];
            cs.seed = seed;
            cs.distribution = name;
            cs.passed = cs.passed && cs.canariesIntact && cs.inputsUnchanged;
            if (!cs.inputsUnchanged)
                addReason(
                    out.reasons, reason("dynamic.input-modified", "the candidate changed its inputs on " + where));
            if (!cs.canariesIntact)
                addReason(out.reasons,
                    reason("dynamic.canary",
                        "the candidate wrote outside its buffers on " + where + " (" + std::to_string(s[kCanaryBad])
                            + " guard words changed)"));
            for (const auto& [rule, detail] : j.failures)
                addReason(out.reasons, reason(rule, detail + " on " + where + " (" + name + " inputs)"));
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
        KL_CU(cuStreamSynchronize(m_stream));
        KL_CU(cuStreamSynchronize(m_hstream));
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
    constexpr int kMaxChecked = 16;
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
        std::vector<std::string> outputNames;
        std::uint64_t ioBytes = 0, perSetBytes = 0;
        const std::uint64_t guard = 2 * SlabLayout::kCanaryBytes + SlabLayout::kMaxGapUnits * kAlign;
        for (const auto& t : sizes) {
            ioBytes += t.bytes;
            const std::uint64_t b = alignUp(t.bytes, kAlign) + guard;
            // candidate's and baseline's buffers, and the harness's pristine inputs or references
            perSetBytes += 3 * b;
            if (t.spec->role == TensorRole::Output)
                outputNames.push_back(t.spec->name);
        }
        for (const auto& w : cb->workspaces())
            perSetBytes += alignUp(w.bytes, kAlign) + guard;
        if (bb)
            for (const auto& w : bb->workspaces())
                perSetBytes += alignUp(w.bytes, kAlign) + guard;
        std::uint64_t fixedBytes = 64ull << 20;
        for (const auto& w : rb->workspaces())
            fixedBytes += alignUp(w.bytes, kAlign) + kAlign;
        // Cold caches: rotate through input sets whose total exceeds 2x L2, so no memset sits in the timed loop.
        const std::uint64_t l2x2 = 2 * static_cast<std::uint64_t>(m_device.l2Bytes);
        // At least 4 sets, each tensor of each set at its own random offset: a streaming kernel's speed depends on
        // where its buffers sit relative to each other (DRAM channel and bank conflicts, about 1-2% on the H200),
        // and a median over several placements repeats across requests where one placement per request did not.
        int sets = static_cast<int>(std::clamp<std::uint64_t>(
            (l2x2 + ioBytes - 1) / std::max<std::uint64_t>(ioBytes, 1) + 1, 4, SlabLayout::kMaxSets - 64));
        std::size_t freeMem = 0, totalMem = 0;
        cuMemGetInfo(&freeMem, &totalMem);
        const std::uint64_t budget = (static_cast<std::uint64_t>(freeMem) + m_cand.capacity() + m_hmem.capacity()) / 2;
        while (sets > 1 && static_cast<std::uint64_t>(sets + 1) * perSetBytes + fixedBytes > budget)
            --sets;
        // Outputs (and workspaces) rotate with a period coprime to the inputs': a buffer meets new inputs each visit.
        const int outSets = outputRotationPeriod(sets, sets);
        st.inputSets = sets;
        st.outputSets = outSets;
        st.rotationBytes = static_cast<std::uint64_t>(sets) * ioBytes;

        // Candidate arena: candidate slabs and the baseline's own (pristine, never shared) slabs.
        const std::uint64_t gran = m_cand.granularity();
        std::vector<CandidateSlab> candSlabs, baseSlabs;
        std::uint64_t candBytes = 2 * gran;
        auto addSlab = [&](std::vector<CandidateSlab>& v, const std::string& name, std::uint64_t bytes, int n,
                           std::uint64_t elements, DType dt, TensorRole role, bool ws, bool zero) {
            CandidateSlab cs;
            cs.name = name;
            cs.layout = planSlab(bytes, n, gran, m_rng);
            cs.elements = elements;
            cs.dtype = dt;
            cs.role = role;
            cs.workspace = ws;
            cs.zeroInit = zero;
            candBytes += cs.layout.mappedBytes;
            v.push_back(std::move(cs));
        };
        for (const auto& t : sizes) {
            const bool in = t.spec->role == TensorRole::Input;
            addSlab(candSlabs, t.spec->name, t.bytes, in ? sets : outSets, t.elements, t.spec->dtype, t.spec->role,
                false, false);
            if (bb)
                addSlab(baseSlabs, t.spec->name, t.bytes, sets, t.elements, t.spec->dtype, t.spec->role, false, false);
        }
        for (const auto& w : cb->workspaces())
            addSlab(candSlabs, w.name, w.bytes, outSets, w.bytes / 4, DType::I32, TensorRole::Output, true, w.zeroInit);
        if (bb)
            for (const auto& w : bb->workspaces())
                addSlab(
                    baseSlabs, w.name, w.bytes, sets, w.bytes / 4, DType::I32, TensorRole::Output, true, w.zeroInit);
        KL_CU(cuStreamSynchronize(m_stream));
        KL_CU(cuStreamSynchronize(m_hstream));
        m_cand.reset(candBytes);
        for (auto* v : { &candSlabs, &baseSlabs })
            for (auto& cs : *v)
                cs.base = mapSlab(cs.layout);
        const CUdeviceptr scratch = m_cand.map(gran);
        std::vector<BufferMap> candIn(sets), candOut(outSets), baseIn(sets), baseOut(sets);
        for (const auto& cs : candSlabs)
            for (int k = 0; k < cs.layout.sets(); ++k)
                (cs.role == TensorRole::Input ? candIn : candOut)[k][cs.name] = cs.buffer(k);
        for (const auto& cs : baseSlabs)
            for (int k = 0; k < cs.layout.sets(); ++k)
                (cs.role == TensorRole::Input ? baseIn : baseOut)[k][cs.name] = cs.buffer(k);

        // Harness arena: pristine inputs, the reference's output for each input set (computed when a re-check first
        // needs it), slots and the compare's pointer lists.
        const int nOut = std::max<int>(1, static_cast<int>(outputNames.size()));
        std::map<std::string, SlabLayout> hInLayout, refLayout;
        std::map<std::string, CUdeviceptr> hInBase, refBase;
        std::uint64_t hBytes = fixedBytes + static_cast<std::uint64_t>(kMaxChecked) * nOut * kSlotCount * 8
            + 2ull * nOut * outSets * 8 * 2 + nOut * 8 * 2;
        for (const auto& t : sizes) {
            if (t.spec->role == TensorRole::Input) {
                hInLayout[t.spec->name] = packedSlab(t.bytes, sets);
                hBytes += hInLayout[t.spec->name].mappedBytes + kAlign;
            } else {
                refLayout[t.spec->name] = packedSlab(t.bytes, sets);
                hBytes += refLayout[t.spec->name].mappedBytes + kAlign;
            }
        }
        CUdeviceptr hSlots = 0, hPairs = 0, hRefSumSq = 0;
        BufferMap refWork;
        std::vector<std::vector<BufferMap>> refBufs(1);
        {
            m_hmem.reset(hBytes, m_hstream);
            hSlots = m_hmem.alloc(static_cast<std::uint64_t>(kMaxChecked) * nOut * kSlotCount * 8);
            hPairs = m_hmem.alloc(2ull * nOut * outSets * 8 * 2);
            hRefSumSq = m_hmem.alloc(nOut * 8);
            KL_CU(
                cuMemsetD8Async(hSlots, 0, static_cast<std::uint64_t>(kMaxChecked) * nOut * kSlotCount * 8, m_hstream));
            KL_CU(cuMemsetD8Async(hRefSumSq, 0, nOut * 8, m_hstream));
            for (auto& [name, l] : hInLayout)
                hInBase[name] = m_hmem.alloc(l.mappedBytes);
            for (auto& [name, l] : refLayout)
                refBase[name] = m_hmem.alloc(l.mappedBytes);
            for (const auto& w : rb->workspaces())
                refWork[w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
        }

        const double setupStart = nowSeconds();
        // Inputs: the same values (from seed and set) in the candidate's, the baseline's and the pristine slabs.
        for (std::size_t ti = 0; ti < sizes.size(); ++ti) {
            const auto& t = sizes[ti];
            if (t.spec->role != TensorRole::Input || !t.elements)
                continue;
            const std::uint64_t seed = o.seed ^ (0x9E3779B97F4A7C15ull * (ti + 1));
            for (auto* v : { &candSlabs, &baseSlabs })
                for (const auto& cs : *v)
                    if (cs.name == t.spec->name && cs.role == TensorRole::Input)
                        m_harness.slabFillInput(
                            m_stream, cs.base, cs.layout, *t.spec, shape, t.elements, Distribution::Normal, seed);
            m_harness.slabFillInput(m_hstream, hInBase.at(t.spec->name), hInLayout.at(t.spec->name), *t.spec, shape,
                t.elements, Distribution::Normal, seed);
        }
        for (auto* v : { &candSlabs, &baseSlabs })
            for (const auto& cs : *v)
                m_harness.slabCanaryFill(m_stream, cs.base, cs.layout);
        // The candidate's input slabs, canaries included, hashed before anything ran and after the last launch.
        auto hashCandidateInputs = [&]() {
            KL_CU(cuMemsetD8Async(scratch, 0, 8, m_stream));
            std::uint64_t salt = 1;
            for (const auto& cs : candSlabs)
                if (cs.role == TensorRole::Input)
                    m_harness.hash(m_stream, cs.base, cs.layout.mappedBytes, salt++ * 0x100000001ull, scratch);
            KL_CU(cuStreamSynchronize(m_stream));
            std::uint64_t h = 0;
            KL_CU(cuMemcpyDtoH(&h, scratch, 8)); // no candidate kernel runs between the hash and this read
            return h;
        };
        const std::uint64_t hashBefore = hashCandidateInputs();

        // Before every batch of timed launches (outside the timed intervals), for candidate and baseline alike:
        // outputs poisoned, workspaces poisoned unless the plan zeroes them, canaries written again. A batch writes
        // each output buffer at most once, so every launch finds its outputs and workspaces freshly initialised.
        std::vector<int> lastInput(static_cast<std::size_t>(outSets), -1);
        auto prepare = [&]() {
            for (auto* v : { &candSlabs, &baseSlabs })
                for (const auto& cs : *v) {
                    if (cs.role != TensorRole::Output)
                        continue;
                    if (!cs.workspace && cs.elements)
                        m_harness.slabPoison(m_stream, cs.base, cs.layout, cs.elements, cs.dtype,
                            HarnessKernels::poisonPattern(cs.dtype, 0));
                    if (cs.workspace && !cs.zeroInit && cs.elements)
                        m_harness.slabPoison(m_stream, cs.base, cs.layout, cs.elements, DType::I32, kWorkspacePoison);
                    m_harness.slabCanaryFill(m_stream, cs.base, cs.layout);
                }
            std::fill(lastInput.begin(), lastInput.end(), -1);
        };
        std::uint64_t canaryBad = 0;
        auto checkCanaries = [&]() {
            KL_CU(cuMemsetD8Async(scratch + 8, 0, 8, m_stream));
            for (const auto& cs : candSlabs)
                m_harness.slabCanaryCheck(m_stream, cs.base, cs.layout, scratch + 8);
        };
        auto readCanaries = [&]() { // after a synchronize
            std::uint64_t bad = 0;
            KL_CU(cuMemcpyDtoH(&bad, scratch + 8, 8));
            canaryBad += bad;
        };

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
        // Launch j of the candidate: input set j mod sets, output set j mod outSets. The baseline runs half a
        // rotation behind on its own buffers, so the second of a pair never finds the first's inputs in L2.
        std::uint64_t candLaunches = 0, baseLaunches = 0;
        auto launchCandidate = [&]() {
            const int k = static_cast<int>(candLaunches % sets), q = static_cast<int>(candLaunches % outSets);
            BufferMap b = candIn[k];
            b.insert(candOut[q].begin(), candOut[q].end());
            cb->run(m_stream, b);
            lastInput[q] = k;
            ++candLaunches;
        };
        auto launchBaseline = [&]() {
            const int k = static_cast<int>((baseLaunches + sets / 2) % sets);
            BufferMap b = baseIn[k];
            b.insert(baseOut[baseLaunches % sets].begin(), baseOut[baseLaunches % sets].end());
            bb->run(m_stream, b);
            ++baseLaunches;
        };
        int checked = 0;
        std::vector<int> checkedBatch;
        std::vector<char> refReady(static_cast<std::size_t>(sets), 0);
        bool refSumDone = false;
        // Every output the last batch wrote, compared with the reference on the pristine copy of the inputs that
        // launch read; the next batch's prepare() waits for the compare.
        auto recheckBatch = [&](int batchIndex) {
            handoff(m_stream, m_hstream);
            for (int q = 0; q < outSets; ++q) {
                const int k = lastInput[static_cast<std::size_t>(q)];
                if (k < 0 || refReady[static_cast<std::size_t>(k)])
                    continue;
                BufferMap b = refWork;
                for (const auto& t : sizes)
                    b[t.spec->name] = t.spec->role == TensorRole::Input
                        ? hInBase.at(t.spec->name) + hInLayout.at(t.spec->name).bufferOffset(k)
                        : refBase.at(t.spec->name) + refLayout.at(t.spec->name).bufferOffset(k);
                rb->run(m_hstream, b);
                refReady[static_cast<std::size_t>(k)] = 1;
                if (!refSumDone) {
                    int oi = 0;
                    for (const auto& t : sizes)
                        if (t.spec->role == TensorRole::Output) {
                            if (t.elements)
                                m_harness.sumSquares(
                                    m_hstream, b.at(t.spec->name), t.elements, t.spec->dtype, hRefSumSq + 8 * oi);
                            ++oi;
                        }
                    refSumDone = true;
                }
            }
            int oi = 0;
            for (const auto& t : sizes) {
                if (t.spec->role != TensorRole::Output)
                    continue;
                const CandidateSlab* cs = nullptr;
                for (const auto& c : candSlabs)
                    if (c.name == t.spec->name && !c.workspace)
                        cs = &c;
                std::vector<std::uint64_t> pairs;
                for (int q = 0; q < outSets; ++q)
                    if (lastInput[static_cast<std::size_t>(q)] >= 0)
                        pairs.push_back(cs->buffer(q));
                const std::size_t count = pairs.size();
                for (int q = 0; q < outSets; ++q)
                    if (const int k = lastInput[static_cast<std::size_t>(q)]; k >= 0)
                        pairs.push_back(refBase.at(t.spec->name) + refLayout.at(t.spec->name).bufferOffset(k));
                const CUdeviceptr lists = hPairs + static_cast<std::uint64_t>(checked % 2) * nOut * outSets * 16
                    + static_cast<std::uint64_t>(oi) * outSets * 16;
                KL_CU(cuMemcpyHtoDAsync(lists, pairs.data(), pairs.size() * 8, m_hstream));
                if (t.elements && count)
                    m_harness.comparePairs(m_hstream, lists, lists + count * 8, static_cast<int>(count), t.elements,
                        t.spec->dtype, HarnessKernels::poisonPattern(t.spec->dtype, 0),
                        hSlots + (static_cast<std::uint64_t>(checked) * nOut + oi) * kSlotCount * 8, hRefSumSq + 8 * oi,
                        t.elements);
                ++oi;
            }
            handoff(m_hstream, m_stream);
            checkedBatch.push_back(batchIndex);
            ++checked;
            // The lists are pageable host memory: the copy above has read them before cuMemcpyHtoDAsync returned.
        };

        try {
            // Estimate, also the warm-up of module, caches of instruction memory and clocks.
            std::vector<double> estC, estB;
            for (int i = 0; i < 5; ++i) {
                if (i % outSets == 0)
                    prepare();
                KL_CU(cuEventRecord(eventAt(0), m_stream));
                launchCandidate();
                KL_CU(cuEventRecord(eventAt(1), m_stream));
                if (bb)
                    launchBaseline();
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
                bool isBase = false;
                std::vector<CUgraphExec> graphs;
                std::vector<std::vector<int>> graphInputs; // per graph, per launch: the input set (candidate)
                int perSample = 1;
                std::vector<double> samples;
            };
            // Graph g holds launches g*R .. g*R+R-1 of one cycle: within a batch each graph runs at most once, so each
            // output buffer is written at most once between two prepare() calls.
            auto buildGraphs = [&](Timed& t, int perSample) {
                t.perSample = std::clamp(perSample, 1, outSets);
                const int groups = std::clamp(outSets / t.perSample, 1, 32);
                for (int g = 0; g < groups; ++g) {
                    CUgraph graph = nullptr;
                    CUgraphExec exec = nullptr;
                    std::vector<int> inputsOfGraph;
                    KL_CU(cuStreamBeginCapture(m_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
                    try {
                        for (int r = 0; r < t.perSample; ++r) {
                            const int j = g * t.perSample + r;
                            const int k = t.isBase ? (j + sets / 2) % sets : j % sets;
                            BufferMap b = t.isBase ? baseIn[k] : candIn[k];
                            const BufferMap& ob = t.isBase ? baseOut[j % sets] : candOut[j];
                            b.insert(ob.begin(), ob.end());
                            (t.isBase ? bb : cb)->run(m_stream, b);
                            inputsOfGraph.push_back(k);
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
                    t.graphInputs.push_back(std::move(inputsOfGraph));
                }
            };
            auto launchGraph = [&](Timed& t, std::size_t g) {
                KL_CU(cuGraphLaunch(t.graphs[g], m_stream));
                if (!t.isBase)
                    for (std::size_t r = 0; r < t.graphInputs[g].size(); ++r)
                        lastInput[g * t.perSample + r] = t.graphInputs[g][r];
            };
            auto perSampleFor = [&](double us) {
                return std::clamp(static_cast<int>(std::ceil(200.0 / std::max(us, 0.5))), 1, 1000);
            };
            Timed cand, base;
            base.isBase = true;
            int batchCap = 1; // samples per batch
            if (graphMode) {
                const int per = perSampleFor(std::min(tC, tB));
                buildGraphs(cand, per);
                if (bb)
                    buildGraphs(base, per);
                batchCap = static_cast<int>(cand.graphs.size());
            } else {
                // A few back-to-back launches per event pair: an event between every launch adds a launch bubble
                // (~2-3 us) that is not the kernel's time.
                const int per = std::clamp(
                    static_cast<int>(std::ceil(300.0 / std::max(std::min(tC, tB), 1.0))), 1, std::min(16, outSets));
                cand.perSample = per;
                base.perSample = per;
                batchCap = std::max(1, outSets / per);
            }
            const double setupMs = (nowSeconds() - setupStart) * 1e3;
            int sampleIndex = 0;
            auto enqueue = [&](Timed& t, std::size_t e0) {
                KL_CU(cuEventRecord(eventAt(e0), m_stream));
                if (graphMode) {
                    const std::size_t g = t.graphs.size();
                    launchGraph(t, static_cast<std::size_t>(sampleIndex) % g);
                } else {
                    for (int r = 0; r < t.perSample; ++r) {
                        if (t.isBase)
                            launchBaseline();
                        else
                            launchCandidate();
                    }
                }
                KL_CU(cuEventRecord(eventAt(e0 + 1), m_stream));
            };
            // Warm-up at the sample rate, untimed.
            prepare();
            for (int i = 0; i < std::min(3, batchCap); ++i) {
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
            const int batch
                = std::min(batchCap, std::clamp(static_cast<int>(std::ceil(5000.0 / std::max(pairUs, 1.0))), 4, 64));
            for (int batchIndex = 0;; ++batchIndex) {
                prepare();
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
                checkCanaries();
                KL_CU(cuStreamSynchronize(m_stream));
                readCanaries();
                for (int b = 0; b < batch; ++b) {
                    const std::size_t e = static_cast<std::size_t>(b) * 4;
                    cand.samples.push_back(elapsedUs(e, e + 1) / cand.perSample);
                    if (bb)
                        base.samples.push_back(elapsedUs(e + 2, e + 3) / base.perSample);
                }
                const int n = static_cast<int>(cand.samples.size());
                bool done = false;
                if (n >= o.minSamples) {
                    const auto tc = summarize(cand.samples, graphMode, cand.perSample);
                    done = relativeHalfWidth(tc) <= o.targetRelHalfWidth;
                    if (bb)
                        done = done
                            && relativeHalfWidth(summarize(base.samples, graphMode, base.perSample))
                                <= o.targetRelHalfWidth;
                    done = done || n >= o.maxSamples || nowSeconds() - start > o.maxSecondsPerShape;
                }
                // Which batches are re-checked is decided only after they ran: the last one, and a random quarter of
                // the others (kMaxChecked in all).
                if (o.recheck && checked < kMaxChecked && (done ? true : checked < kMaxChecked - 1 && rng() % 4 == 0))
                    recheckBatch(batchIndex);
                if (done)
                    break;
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
                Timed g;
                try {
                    buildGraphs(g, perSampleFor(tC));
                    for (int i = 0; i < 12; ++i) {
                        if (i % static_cast<int>(g.graphs.size()) == 0)
                            prepare();
                        KL_CU(cuEventRecord(eventAt(2 * i), m_stream));
                        launchGraph(g, static_cast<std::size_t>(i) % g.graphs.size());
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

            checkCanaries();
            KL_CU(cuStreamSynchronize(m_stream));
            readCanaries();
            const bool inputsUnchanged = hashCandidateInputs() == hashBefore;
            KL_CU(cuStreamSynchronize(m_hstream));
            st.checkedBatches = checked;
            bool allOk = inputsUnchanged && canaryBad == 0;
            if (checked) {
                const std::vector<Tolerance> tolerances = outputTolerances(lp, outputNames);
                std::vector<std::uint64_t> host(static_cast<std::size_t>(checked) * nOut * kSlotCount);
                {
                    KL_CU(cuMemcpyDtoH(host.data(), hSlots, host.size() * 8));
                }
                for (int c = 0; c < checked; ++c) {
                    std::vector<OutputError> errors;
                    for (int oi = 0; oi < static_cast<int>(outputNames.size()); ++oi)
                        errors.push_back(
                            readOutputError(&host[(static_cast<std::size_t>(c) * nOut + oi) * kSlotCount]));
                    OutputJudgement j = judgeOutputs(outputNames, errors, tolerances);
                    CorrectnessStats& cs = j.stats;
                    cs.canariesIntact = canaryBad == 0;
                    cs.inputsUnchanged = inputsUnchanged;
                    cs.distribution = "timed:" + std::to_string(checkedBatch[static_cast<std::size_t>(c)]);
                    cs.seed = o.seed;
                    cs.passed = cs.passed && cs.canariesIntact && cs.inputsUnchanged;
                    if (!j.failures.empty())
                        addReason(out.reasons,
                            reason("dynamic.timed-output-wrong",
                                "outputs written during the timed runs are wrong on shape " + shape.label() + ": "
                                    + j.failures.front().second));
                    allOk = allOk && cs.passed;
                    st.result.checks.push_back(cs);
                }
            }
            if (!inputsUnchanged)
                addReason(out.reasons,
                    reason("dynamic.input-modified",
                        "the candidate changed its inputs during the timed runs on shape " + shape.label()));
            if (canaryBad)
                addReason(out.reasons,
                    reason("dynamic.canary",
                        "the candidate wrote outside its buffers during the timed runs on shape " + shape.label() + " ("
                            + std::to_string(canaryBad) + " guard words changed)"));
            st.result.correct = allOk;
            std::fprintf(stderr,
                "[worker] time %s: sets %d/%d %s x%d samples %d checked %d setup %.1f ms measure %.1f ms tail %.1f "
                "ms\n",
                shape.label().c_str(), sets, outSets, graphMode ? "graph" : "events", cand.perSample,
                static_cast<int>(cand.samples.size()), checked, setupMs, measureMs, (nowSeconds() - tailStart) * 1e3);
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
    std::uint64_t ioBytes = 0;
    for (const auto& t : sizes)
        ioBytes += t.bytes;
    const int sets = static_cast<int>(std::clamp<std::uint64_t>(
        2 * static_cast<std::uint64_t>(m_device.l2Bytes) / std::max<std::uint64_t>(ioBytes, 1) + 1, 2, 256));
    std::vector<CandidateSlab> slabs;
    std::uint64_t bytes = m_cand.granularity();
    for (const auto& t : sizes) {
        CandidateSlab cs;
        cs.name = t.spec->name;
        cs.layout = planSlab(t.bytes, sets, m_cand.granularity(), m_rng);
        cs.elements = t.elements;
        cs.dtype = t.spec->dtype;
        cs.role = t.spec->role;
        bytes += cs.layout.mappedBytes;
        slabs.push_back(std::move(cs));
    }
    for (const auto& w : cb->workspaces()) {
        CandidateSlab cs;
        cs.name = w.name;
        cs.layout = planSlab(w.bytes, sets, m_cand.granularity(), m_rng);
        cs.workspace = true;
        bytes += cs.layout.mappedBytes;
        slabs.push_back(std::move(cs));
    }
    KL_CU(cuStreamSynchronize(m_stream));
    m_cand.reset(bytes);
    std::vector<BufferMap> bufs(static_cast<std::size_t>(sets));
    for (std::size_t i = 0; i < slabs.size(); ++i) {
        auto& cs = slabs[i];
        cs.base = mapSlab(cs.layout);
        m_harness.slabCanaryFill(m_stream, cs.base, cs.layout);
        for (int k = 0; k < sets; ++k)
            bufs[static_cast<std::size_t>(k)][cs.name] = cs.buffer(k);
        const TensorSpec* spec = p.tensor(cs.name);
        if (!cs.workspace && cs.elements && spec && spec->role == TensorRole::Input)
            m_harness.slabFillInput(
                m_stream, cs.base, cs.layout, *spec, s, cs.elements, Distribution::Normal, 77 + i * 1000);
        else if (!cs.workspace && cs.elements)
            m_harness.slabFill(m_stream, cs.base, cs.layout, cs.elements, cs.dtype, Distribution::Normal, 77 + i * 1000,
                spec ? spec->scale : 1.0);
    }
    for (int i = 0; i < 3; ++i)
        cb->run(m_stream, bufs[i % sets]);
    KL_CU(cuStreamSynchronize(m_stream));
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
