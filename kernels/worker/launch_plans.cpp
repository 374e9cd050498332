#include "kernels/worker/launch_plans.h"

#include "core/errors.h"
#include "kernels/worker/cuda_check.h"

#ifdef KL_WORKER_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

#include <algorithm>
#include <climits>
#include <cstring>

namespace kl::worker {

namespace {

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
                bool empty = false;
                for (int d = 0; d < 3; ++d) {
                    const std::int64_t g = evalInt(step.grid[d], "grid", step.line);
                    const std::int64_t bl = evalInt(step.block[d], "block", step.line);
                    const std::int64_t gmax = d == 0 ? INT32_MAX : 65535;
                    const std::int64_t bmax = d == 2 ? 64 : 1024;
                    if (g < 0 || g > gmax)
                        throw LaunchConfigError(m_label + " line " + std::to_string(step.line) + ": grid dimension "
                            + std::to_string(d) + " = " + std::to_string(g) + " is outside [0, " + std::to_string(gmax)
                            + "] for shape " + s.label());
                    empty = empty || g == 0;
                    if (bl < 1 || bl > bmax)
                        throw LaunchConfigError(m_label + " line " + std::to_string(step.line) + ": block dimension "
                            + std::to_string(d) + " = " + std::to_string(bl) + " is outside [1, " + std::to_string(bmax)
                            + "]");
                    st.grid[d] = static_cast<unsigned>(g);
                    st.block[d] = static_cast<unsigned>(bl);
                    threads *= bl;
                }
                if (empty)
                    continue; // a grid of no blocks launches nothing (a split-K reduction without splits)
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
                // The 48 KiB a launch gets without opting in include the kernel's static shared memory.
                if (smem + fn.staticSmem > 48 * 1024)
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
            if (cluster[0] * cluster[1] * cluster[2] == 1)
                return; // a cluster of one block is a plain launch: the attribute alone cost gemm_bf16's split-K
                        // point 1 us at M=16, N=K=4096 (17.8 against 16.8 us)
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

} // namespace

std::shared_ptr<Plan> makeKernelPlan(CUmodule module, KernelSpec spec, ParamValues params,
    const std::map<std::string, std::string>& lowered, const DeviceInfo& device, std::string label,
    std::map<std::string, KernelAbi> abi)
{
    return std::make_shared<KernelPlan>(
        module, std::move(spec), std::move(params), lowered, device, std::move(label), std::move(abi));
}

#ifdef KL_WORKER_HAVE_CUBLAS
std::shared_ptr<Plan> makeCublasGemmPlan(void* cublasHandle)
{
    return std::make_shared<CublasGemmPlan>(static_cast<cublasHandle_t>(cublasHandle));
}
#endif

void noteGraphReplay(const BoundPlan& kernelPlan)
{
    if (launchLedger().active)
        for (const auto& st : static_cast<const KernelBound&>(kernelPlan).steps)
            launchLedger().note(st.symbol, st.grid, st.block);
}

} // namespace kl::worker
