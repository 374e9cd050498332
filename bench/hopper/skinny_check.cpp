// skinny_check: gemm_bf16's sm_90a template outside the harness, to see a new path work (or where it does not) in
// seconds on the GPU machine. The template is compiled by NVRTC at --params; every launch of its plan is made with
// the geometry its @kl:launch lines give at this device's SM count (the rules of kernels/worker/launch_plans.cpp: a
// grid of 0 is not launched, a cluster of one block is a plain launch, @kl:tensormap maps encoded per buffer); C is
// checked against the problem's reference (its fp32 build) on random inputs with a NaN-poisoned output, and wrong
// elements are located by token row and column tile; then a CUDA graph of launches over buffer sets that rotate past
// the L2 is timed against cuBLAS (cublasGemmEx, as the worker calls it) the same way, alternating.
// Not the verdict (kloop eval is): a quick look with clear failure output, one line per shape.
//   skinny_check [--params K=V,...] [--shapes MxNxK,...] [--no-time]
// Exit 0 when every shape is correct, 1 when one is not (or faults), 2 on a usage or compile error, 4 on a hang.
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/problem.h"
#include "core/session_store.h"
#include "core/tensor_map.h"
#include "kernels/nvrtc_compiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublas_v2.h>
#include <cuda.h>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

void checkCu(CUresult r, const char* what, int line)
{
    if (r == CUDA_SUCCESS)
        return;
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    std::fprintf(stderr, "skinny_check.cpp:%d: %s failed: %s\n", line, what, s ? s : "?");
    std::exit(3);
}
#define CU(x) checkCu((x), #x, __LINE__)

struct Gemm {
    int M = 0, N = 0, K = 0;
    std::string label() const
    {
        return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
    }
};

// The issue's decode shapes, then shapes that stress the edges: one token, a ragged token tile, column tiles past N,
// K slices of unequal length and slices with no k-block, the largest K.
std::vector<Gemm> defaultShapes()
{
    std::vector<Gemm> out;
    for (int m : { 16, 128 })
        for (int n : { 4096, 8192, 14336 })
            for (int k : { 4096, 8192, 14336 })
                out.push_back({ m, n, k });
    for (const Gemm& g : std::vector<Gemm> { { 1, 4096, 4096 }, { 1, 256, 256 }, { 33, 320, 704 }, { 77, 4160, 1088 },
             { 128, 4160, 1088 }, { 100, 16384, 16384 }, { 5, 2112, 576 } })
        out.push_back(g);
    return out;
}

std::vector<std::string> split(const std::string& s, char sep)
{
    std::vector<std::string> out;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, sep))
        if (!item.empty())
            out.push_back(item);
    return out;
}

const char* kFillSource = R"(#include <cuda_bf16.h>
// Uniform in [-1, 1): a hash of the index and seed (no state), so a pool fills in one pass.
extern "C" __global__ void fill_bf16(__nv_bfloat16* p, unsigned long long n, unsigned seed)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 0x9E3779B1u ^ (unsigned)(i >> 32) * 0x85EBCA77u ^ seed;
        h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
        p[i] = __float2bfloat16((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}
)";

struct Module {
    CUmodule mod = nullptr;
    std::map<std::string, CUfunction> fn;
};

Module load(kl::NvrtcCompiler& compiler, const std::string& source, const kl::ParamValues& params,
    const std::vector<std::string>& kernels, const std::string& arch, bool print)
{
    kl::CompileJob job;
    job.source = source;
    job.params = params;
    job.arch = arch;
    job.kernels = kernels;
    const auto m = compiler.compile(job);
    if (!m->report.ok) {
        std::fprintf(stderr, "compile failed:\n%s\n", m->report.log.c_str());
        std::exit(2);
    }
    if (print)
        for (const auto& k : m->report.kernels)
            std::printf("  %s: %d registers, %d B spill stores, %d B static smem, %d B local\n", k.kernel.c_str(),
                k.registers, k.spillStores, k.staticSharedBytes, k.localBytes);
    Module out;
    CU(cuModuleLoadData(&out.mod, m->cubin.data()));
    for (const auto& k : kernels) {
        const auto it = m->loweredNames.find(k);
        CU(cuModuleGetFunction(&out.fn[k], out.mod, it != m->loweredNames.end() ? it->second.c_str() : k.c_str()));
    }
    return out;
}

std::vector<std::string> kernelNames(const kl::KernelSpec& spec)
{
    std::vector<std::string> out;
    for (const auto& l : spec.launches)
        if (std::find(out.begin(), out.end(), l.kernel) == out.end())
            out.push_back(l.kernel);
    return out;
}

struct Launch {
    const kl::LaunchStep* step = nullptr;
    CUfunction fn = nullptr;
    unsigned grid[3] = { 1, 1, 1 }, block[3] = { 1, 1, 1 }, cluster[3] = { 1, 1, 1 };
    unsigned smem = 0;
    bool clustered = false;
};

// The plan's launches at one shape as the worker binds them.
std::vector<Launch> bindPlan(const kl::KernelSpec& spec, const Module& m, const kl::Bindings& vars)
{
    std::vector<Launch> out;
    for (const auto& l : spec.launches) {
        Launch x;
        x.step = &l;
        x.fn = m.fn.at(l.kernel);
        bool empty = false;
        for (int d = 0; d < 3; ++d) {
            const auto g = l.grid[d].evaluateInt(vars);
            empty = empty || g == 0;
            x.grid[d] = static_cast<unsigned>(g);
            x.block[d] = static_cast<unsigned>(l.block[d].evaluateInt(vars));
            x.cluster[d] = static_cast<unsigned>(l.hasCluster ? l.cluster[d].evaluateInt(vars) : 1);
        }
        if (empty)
            continue;
        x.smem = l.sharedBytes.empty() ? 0 : static_cast<unsigned>(l.sharedBytes.evaluateInt(vars));
        x.clustered = x.cluster[0] * x.cluster[1] * x.cluster[2] > 1;
        if (x.smem > 48 * 1024)
            CU(cuFuncSetAttribute(x.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(x.smem)));
        out.push_back(x);
    }
    return out;
}

CUlaunchConfig launchConfig(const Launch& x, CUstream s, CUlaunchAttribute* attrs)
{
    CUlaunchConfig c {};
    c.gridDimX = x.grid[0];
    c.gridDimY = x.grid[1];
    c.gridDimZ = x.grid[2];
    c.blockDimX = x.block[0];
    c.blockDimY = x.block[1];
    c.blockDimZ = x.block[2];
    c.sharedMemBytes = x.smem;
    c.hStream = s;
    c.attrs = attrs;
    c.numAttrs = 0;
    if (x.clustered) {
        attrs[c.numAttrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[c.numAttrs].value.clusterDim.x = x.cluster[0];
        attrs[c.numAttrs].value.clusterDim.y = x.cluster[1];
        attrs[c.numAttrs].value.clusterDim.z = x.cluster[2];
        ++c.numAttrs;
    }
    if (x.step->programmaticLaunch) {
        attrs[c.numAttrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[c.numAttrs].value.programmaticStreamSerializationAllowed = 1;
        ++c.numAttrs;
    }
    return c;
}

// One input/output set: where A, B, C and the workspaces of one launch live.
struct Set {
    CUdeviceptr A = 0, B = 0, C = 0;
    std::map<std::string, CUdeviceptr> ws;
    // The buffer of a tensor or workspace, 0 when the name is neither.
    CUdeviceptr at(const std::string& name) const
    {
        if (name == "A" || name == "B" || name == "C")
            return name == "A" ? A : name == "B" ? B : C;
        const auto it = ws.find(name);
        return it != ws.end() ? it->second : 0;
    }
};

class Runner {
public:
    Runner(const kl::Problem& p, const kl::KernelSpec& spec, const kl::Bindings& vars, std::vector<Launch> plan)
        : m_p(p)
        , m_spec(spec)
        , m_vars(vars)
        , m_plan(std::move(plan))
    {
        for (const auto& w : spec.workspaces)
            m_wsBytes[w.name] = static_cast<std::uint64_t>(w.bytes.evaluateInt(vars));
    }
    const std::vector<Launch>& plan() const { return m_plan; }
    const std::map<std::string, std::uint64_t>& workspaceBytes() const { return m_wsBytes; }

    void run(const Set& set, CUstream s)
    {
        for (const auto& w : m_spec.workspaces)
            if (w.zeroInit && m_wsBytes.at(w.name))
                CU(cuMemsetD8Async(set.ws.at(w.name), 0, m_wsBytes.at(w.name), s));
        for (const auto& x : m_plan) {
            alignas(64) unsigned char storage[32][sizeof(CUtensorMap)];
            void* argv[32];
            int i = 0;
            for (const auto& a : x.step->args) {
                if (const CUdeviceptr ptr = set.at(a)) {
                    std::memcpy(storage[i], &ptr, sizeof ptr);
                } else if (const kl::TensorMapSpec* map = m_spec.tensorMap(a)) {
                    const CUtensorMap& tm = encoded(*map, set.at(map->tensor));
                    std::memcpy(storage[i], &tm, sizeof tm);
                } else {
                    const int v = static_cast<int>(m_vars.at(a)); // a dim or a parameter
                    std::memcpy(storage[i], &v, sizeof v);
                }
                argv[i] = storage[i];
                ++i;
            }
            CUlaunchAttribute attrs[2];
            const CUlaunchConfig c = launchConfig(x, s, attrs);
            CU(cuLaunchKernelEx(&c, x.fn, argv, nullptr));
        }
    }

private:
    const CUtensorMap& encoded(const kl::TensorMapSpec& map, CUdeviceptr address)
    {
        const auto key = std::make_pair(map.name, address);
        if (const auto it = m_maps.find(key); it != m_maps.end())
            return it->second;
        const kl::TensorMapGeometry g = kl::resolveTensorMap(map, m_p, m_vars);
        cuuint64_t dims[kl::TensorMapSpec::kMaxRank], strides[kl::TensorMapSpec::kMaxRank];
        cuuint32_t box[kl::TensorMapSpec::kMaxRank], elementStrides[kl::TensorMapSpec::kMaxRank];
        for (int d = 0; d < g.rank; ++d) {
            dims[d] = g.globalDim[d];
            box[d] = g.box[d];
            elementStrides[d] = g.elementStrides[d];
            if (d + 1 < g.rank)
                strides[d] = g.globalStrideBytes[d];
        }
        CUtensorMap tm;
        CU(cuTensorMapEncodeTiled(&tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(g.rank),
            reinterpret_cast<void*>(address), dims, strides, box, elementStrides,
            static_cast<CUtensorMapInterleave>(g.interleave), static_cast<CUtensorMapSwizzle>(g.swizzle),
            static_cast<CUtensorMapL2promotion>(g.l2Promotion),
            g.oobFill == kl::TmaOobFill::Zero ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
                                              : CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA));
        return m_maps.emplace(key, tm).first->second;
    }

    const kl::Problem& m_p;
    const kl::KernelSpec& m_spec;
    kl::Bindings m_vars;
    std::vector<Launch> m_plan;
    std::map<std::string, std::uint64_t> m_wsBytes;
    std::map<std::pair<std::string, CUdeviceptr>, CUtensorMap> m_maps;
};

float bf16ToFloat(std::uint16_t b)
{
    const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// The median of `replays` timings of one graph replay (after two warm-ups).
double medianReplayUs(CUgraphExec exec, CUstream s, int replays)
{
    CUevent a, b;
    CU(cuEventCreate(&a, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&b, CU_EVENT_DEFAULT));
    for (int i = 0; i < 2; ++i)
        CU(cuGraphLaunch(exec, s));
    std::vector<double> t;
    for (int i = 0; i < replays; ++i) {
        CU(cuEventRecord(a, s));
        CU(cuGraphLaunch(exec, s));
        CU(cuEventRecord(b, s));
        CU(cuEventSynchronize(b));
        float ms = 0;
        CU(cuEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0);
    }
    CU(cuEventDestroy(a));
    CU(cuEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

template <class Body> CUgraphExec capture(CUstream s, int launches, Body body)
{
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int j = 0; j < launches; ++j)
        body(j);
    CUgraph g;
    CU(cuStreamEndCapture(s, &g));
    CUgraphExec exec;
    CU(cuGraphInstantiate(&exec, g, 0));
    CU(cuGraphDestroy(g));
    return exec;
}

} // namespace

int main(int argc, char** argv)
{
    std::string paramsArg, shapesArg;
    bool timeIt = true;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--params" && i + 1 < argc)
            paramsArg = argv[++i];
        else if (a == "--shapes" && i + 1 < argc)
            shapesArg = argv[++i];
        else if (a == "--no-time")
            timeIt = false;
        else {
            std::fprintf(stderr, "usage: skinny_check [--params K=V,...] [--shapes MxNxK,...] [--no-time]\n");
            return 2;
        }
    }
    const std::filesystem::path folder = std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems" / "gemm_bf16";
    const kl::Problem p = kl::loadProblem(folder.string());
    const std::string source = kl::readFile(folder / p.templateFor(90));
    const std::string refSource = kl::readFile(folder / p.referenceFile);
    const kl::KernelSpec spec = kl::parseKernelSpec(source, p);
    const kl::KernelSpec refSpec = kl::parseKernelSpec(refSource, p);
    kl::ParamValues params = spec.defaults();
    for (const auto& kv : split(paramsArg, ',')) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos) {
            std::fprintf(stderr, "--params: '%s' is not NAME=VALUE\n", kv.c_str());
            return 2;
        }
        params[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
    }
    spec.requireValidParams(params);
    std::vector<Gemm> shapes;
    for (const auto& s : split(shapesArg, ',')) {
        const auto d = split(s, 'x');
        if (d.size() != 3) {
            std::fprintf(stderr, "--shapes: '%s' is not MxNxK\n", s.c_str());
            return 2;
        }
        shapes.push_back({ std::stoi(d[0]), std::stoi(d[1]), std::stoi(d[2]) });
    }
    if (shapes.empty())
        shapes = defaultShapes();

    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    int major = 0, minor = 0, sms = 0, l2 = 0;
    CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CU(cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
    const std::string arch = kl::archForComputeCapability(major, minor);
    std::string paramText;
    for (const auto& [k, v] : params)
        paramText += (paramText.empty() ? "" : ",") + k + "=" + std::to_string(v);
    std::printf("skinny_check: %s, %d SMs, %d MiB L2; template %s at %s\n", arch.c_str(), sms, l2 >> 20,
        p.templateFor(90).c_str(), paramText.c_str());

    kl::NvrtcCompiler compiler(std::filesystem::temp_directory_path() / "kl-skinny-check-cache", 2);
    const Module cand = load(compiler, source, params, kernelNames(spec), arch, true);
    const Module ref = load(compiler, refSource, {}, kernelNames(refSpec), arch, false);
    const Module fill = load(compiler, kFillSource, {}, { "fill_bf16" }, arch, false);

    // Input pools filled once; each set of a shape takes the next slice, so consecutive launches of a timed graph
    // read different weights (past the L2 for every shape here).
    std::uint64_t maxA = 0, maxB = 0, maxC = 0;
    for (const auto& g : shapes) {
        maxA = std::max<std::uint64_t>(maxA, 2ull * g.M * g.K);
        maxB = std::max<std::uint64_t>(maxB, 2ull * g.N * g.K);
        maxC = std::max<std::uint64_t>(maxC, 2ull * g.M * g.N);
    }
    const std::uint64_t poolA = std::max<std::uint64_t>(2 * maxA, 64ull << 20);
    const std::uint64_t poolB = std::max<std::uint64_t>(2 * maxB, 1ull << 30);
    CUdeviceptr dA, dB;
    CU(cuMemAlloc(&dA, poolA));
    CU(cuMemAlloc(&dB, poolB));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (auto [ptr, bytes, seed] : { std::tuple { dA, poolA, 1u }, std::tuple { dB, poolB, 2u } }) {
        unsigned long long n = bytes / 2;
        void* args[] = { &ptr, &n, &seed };
        CU(cuLaunchKernel(fill.fn.at("fill_bf16"), 4 * sms, 1, 1, 256, 1, 1, 0, s, args, nullptr));
    }
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "cublasCreate failed\n");
        return 3;
    }
    CUdeviceptr blasWs;
    CU(cuMemAlloc(&blasWs, 32u << 20));
    cublasSetWorkspace(blas, reinterpret_cast<void*>(blasWs), 32u << 20);
    cublasSetStream(blas, reinterpret_cast<cudaStream_t>(s));
    CU(cuStreamSynchronize(s));

    int wrong = 0;
    std::vector<std::string> table;
    for (const auto& g : shapes) {
        kl::Shape shape;
        shape.dims = { { "M", g.M }, { "N", g.N }, { "K", g.K } };
        std::string why;
        if (!p.shapeIsValid(shape) || !spec.satisfies(params, shape.bindings(), &why)) {
            std::printf("%s: not a valid shape or point here (%s)\n", g.label().c_str(), why.c_str());
            continue;
        }
        kl::Bindings vars = kl::bindingsFor(params, shape.bindings());
        vars[kl::kSmCountIdentifier] = sms;
        Runner run(p, spec, vars, bindPlan(spec, cand, vars));
        Runner reference(p, refSpec, shape.bindings(), bindPlan(refSpec, ref, shape.bindings()));

        // What the plan launches here, and how many of its clusters the device holds at once.
        std::string geometry;
        for (const auto& x : run.plan()) {
            geometry += x.step->kernel + " grid=(" + std::to_string(x.grid[0]) + "," + std::to_string(x.grid[1]) + ","
                + std::to_string(x.grid[2]) + ") smem=" + std::to_string(x.smem);
            if (x.clustered) {
                CUlaunchAttribute attrs[2];
                const CUlaunchConfig c = launchConfig(x, s, attrs);
                int resident = 0;
                CU(cuOccupancyMaxActiveClusters(&resident, x.fn, &c));
                const unsigned clusters
                    = x.grid[0] * x.grid[1] * x.grid[2] / (x.cluster[0] * x.cluster[1] * x.cluster[2]);
                geometry += " cluster=" + std::to_string(x.cluster[0]) + " clusters=" + std::to_string(clusters)
                    + " resident<=" + std::to_string(resident)
                    + (static_cast<int>(clusters) > resident ? " (WAVES)" : "");
            }
            if (x.step->kernel == "gemm_skinny") {
                const int tn = std::max(16, static_cast<int>(std::pow(2, std::ceil(std::log2(std::max(g.M, 1))))));
                const int stageBytes = (static_cast<int>(params.at("SBN")) + tn) * 128;
                geometry += " tokens=" + std::to_string(tn) + " stages=" + std::to_string((x.smem - 1024) / stageBytes);
            }
            geometry += "; ";
        }

        // Sets: as many slices of the pools as fit, at most 16.
        const std::uint64_t bytesA = 2ull * g.M * g.K, bytesB = 2ull * g.N * g.K, bytesC = 2ull * g.M * g.N;
        const int sets = static_cast<int>(std::clamp<std::uint64_t>(std::min(poolA / bytesA, poolB / bytesB), 1, 16));
        CUdeviceptr dC, dRef;
        CU(cuMemAlloc(&dC, bytesC * sets));
        CU(cuMemAlloc(&dRef, bytesC));
        std::vector<Set> setList(sets);
        std::vector<CUdeviceptr> owned;
        for (int i = 0; i < sets; ++i) {
            setList[i].A = dA + i * bytesA;
            setList[i].B = dB + i * bytesB;
            setList[i].C = dC + i * bytesC;
            for (const auto& [name, bytes] : run.workspaceBytes()) {
                CUdeviceptr w;
                CU(cuMemAlloc(&w, std::max<std::uint64_t>(bytes, 256)));
                setList[i].ws[name] = w;
                owned.push_back(w);
            }
        }

        // Correctness on set 0: C poisoned with a NaN nothing computes, the plan, then the reference.
        CU(cuMemsetD16Async(dC, 0x7FC1, bytesC / 2, s));
        run.run(setList[0], s);
        // A kernel waiting forever (a barrier or mbarrier phase nobody completes) is named, not waited for.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        CUresult launched;
        while ((launched = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (launched == CUDA_ERROR_NOT_READY) {
            std::printf("%s: HANG (not done after 10 s) %s\n", g.label().c_str(), geometry.c_str());
            std::fflush(stdout);
            std::_Exit(4);
        }
        if (launched != CUDA_SUCCESS) {
            const char* e = nullptr;
            cuGetErrorString(launched, &e);
            std::printf("%s: FAULT %s (%s)\n", g.label().c_str(), e ? e : "?", geometry.c_str());
            return 1; // a sticky error: the context is gone
        }
        Set refSet = setList[0];
        refSet.C = dRef;
        reference.run(refSet, s);
        CU(cuStreamSynchronize(s));
        std::vector<std::uint16_t> got(bytesC / 2), want(bytesC / 2);
        CU(cuMemcpyDtoH(got.data(), dC, bytesC));
        CU(cuMemcpyDtoH(want.data(), dRef, bytesC));
        double err2 = 0, ref2 = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
            const double r = bf16ToFloat(want[i]);
            ref2 += r * r;
        }
        const double rms = std::sqrt(ref2 / static_cast<double>(got.size()));
        double maxErr = 0;
        long long bad = 0, unwritten = 0;
        std::map<int, int> badRows, badTiles;
        std::string examples;
        const int tileWidth = static_cast<int>(params.at("SBN"));
        for (std::size_t i = 0; i < got.size(); ++i) {
            const double c = bf16ToFloat(got[i]), r = bf16ToFloat(want[i]);
            const int m = static_cast<int>(i / g.N), n = static_cast<int>(i % g.N);
            if (got[i] == 0x7FC1)
                ++unwritten;
            const double e = std::isfinite(c) ? std::abs(c - r) / std::max({ std::abs(r), rms, 1.0 }) : 1e30;
            err2 += std::isfinite(c) ? (c - r) * (c - r) : 1e30;
            maxErr = std::max(maxErr, e);
            if (e > 0.02) {
                ++bad;
                ++badRows[m];
                ++badTiles[n / tileWidth];
                if (bad <= 4)
                    examples += " (" + std::to_string(m) + "," + std::to_string(n) + ") got " + std::to_string(c)
                        + " want " + std::to_string(r) + ";";
            }
        }
        const double relL2 = std::sqrt(err2 / std::max(ref2, 1e-30));
        const bool ok = bad == 0 && relL2 < 0.01;
        wrong += !ok;
        char line[512];
        std::snprintf(
            line, sizeof line, "%s: %s rel_l2 %.2e max %.2e", g.label().c_str(), ok ? "ok" : "WRONG", relL2, maxErr);
        std::string text = line;
        if (!ok) {
            text += " | " + std::to_string(bad) + " bad of " + std::to_string(got.size()) + ", "
                + std::to_string(unwritten) + " unwritten; rows";
            int shown = 0;
            for (const auto& [m, count] : badRows)
                if (shown++ < 12)
                    text += " " + std::to_string(m) + ":" + std::to_string(count);
            text += " (" + std::to_string(badRows.size()) + " rows); column tiles of " + std::to_string(tileWidth);
            shown = 0;
            for (const auto& [t, count] : badTiles)
                if (shown++ < 12)
                    text += " " + std::to_string(t) + ":" + std::to_string(count);
            text += " (" + std::to_string(badTiles.size()) + " tiles);" + examples;
        }
        std::printf("%s\n  %s\n", text.c_str(), geometry.c_str());
        std::fflush(stdout);

        if (timeIt) {
            // A graph of R launches over the sets (R so that a replay takes about 300 us), timed alternately with
            // cuBLAS's graph over the same sets.
            CUevent a, b;
            CU(cuEventCreate(&a, CU_EVENT_DEFAULT));
            CU(cuEventCreate(&b, CU_EVENT_DEFAULT));
            CU(cuEventRecord(a, s));
            for (int i = 0; i < 3; ++i)
                run.run(setList[i % sets], s);
            CU(cuEventRecord(b, s));
            CU(cuEventSynchronize(b));
            float ms = 0;
            CU(cuEventElapsedTime(&ms, a, b));
            const int launches = std::clamp(static_cast<int>(std::ceil(300.0 / (ms * 1000.0 / 3))), 1, 200);
            const CUgraphExec ours = capture(s, launches, [&](int j) { run.run(setList[j % sets], s); });
            const CUgraphExec theirs = capture(s, launches, [&](int j) {
                const float alpha = 1.0f, beta = 0.0f;
                const Set& x = setList[j % sets];
                if (cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, g.N, g.M, g.K, &alpha, reinterpret_cast<void*>(x.B),
                        CUDA_R_16BF, g.K, reinterpret_cast<void*>(x.A), CUDA_R_16BF, g.K, &beta,
                        reinterpret_cast<void*>(x.C), CUDA_R_16BF, g.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
                    != CUBLAS_STATUS_SUCCESS) {
                    std::fprintf(stderr, "cublasGemmEx failed\n");
                    std::exit(3);
                }
            });
            std::vector<double> us, base;
            for (int r = 0; r < 5; ++r) {
                us.push_back(medianReplayUs(ours, s, 5) / launches);
                base.push_back(medianReplayUs(theirs, s, 5) / launches);
            }
            std::sort(us.begin(), us.end());
            std::sort(base.begin(), base.end());
            const double t = us[2], tb = base[2];
            std::printf("  ours %.2f us, cuBLAS %.2f us: %.3fx (graphs of %d launches over %d sets)\n", t, tb, tb / t,
                launches, sets);
            char row[256];
            std::snprintf(row, sizeof row, "| %s | %s | %.2f | %.2f | %.3f |", g.label().c_str(), ok ? "ok" : "WRONG",
                t, tb, tb / t);
            table.push_back(row);
            CU(cuGraphExecDestroy(ours));
            CU(cuGraphExecDestroy(theirs));
            CU(cuEventDestroy(a));
            CU(cuEventDestroy(b));
        }
        for (const CUdeviceptr w : owned)
            CU(cuMemFree(w));
        CU(cuMemFree(dC));
        CU(cuMemFree(dRef));
    }
    if (!table.empty()) {
        std::printf("\n| shape | correct | ours us | cuBLAS us | cuBLAS / ours |\n|---|---|---|---|---|\n");
        for (const auto& r : table)
            std::printf("%s\n", r.c_str());
    }
    std::printf("%d of %zu shapes wrong\n", wrong, shapes.size());
    return wrong ? 1 : 0;
}
