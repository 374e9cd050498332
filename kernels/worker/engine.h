#pragma once
// The worker's GPU engine: owns the context, the stream, device memory, loaded modules and the launch
// plans, and runs verification, timing and traces exactly as kernels/HARNESS.md describes.
#include "core/device.h"
#include "core/evaluation.h"
#include "core/kernel_spec.h"
#include "core/pipeline_result.h"
#include "core/problem.h"
#include "kernels/nvrtc_compiler.h"
#include "kernels/worker/cupti_kernel_log.h"
#include "kernels/worker/device_memory.h"
#include "kernels/worker/harness_kernels.h"
#include "kernels/worker/nvml_monitor.h"

#include <cstdint>
#include <cuda.h>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace kl::worker {

using BufferMap = std::map<std::string, CUdeviceptr>;

struct ExpectedKernel {
    std::string symbol;
    int grid[3];
    int block[3];
};

// Collects what the harness launched while CUPTI watches, to compare with what actually ran.
struct LaunchLedger {
    bool active = false;
    std::vector<ExpectedKernel> launched;
    void note(const std::string& symbol, const unsigned g[3], const unsigned b[3]);
};
LaunchLedger& launchLedger();

struct WorkspaceNeed {
    std::string name;
    std::uint64_t bytes = 0;
    bool zeroInit = false;
};

// A plan bound to one shape: geometry and argument kinds resolved once, pointers filled per run.
class BoundPlan {
public:
    virtual ~BoundPlan() = default;
    virtual void run(CUstream s, const BufferMap& buffers) const = 0;
    virtual const std::vector<WorkspaceNeed>& workspaces() const = 0;
    virtual std::vector<std::string> symbols() const = 0;
};

class Plan {
public:
    virtual ~Plan() = default;
    virtual std::string label() const = 0;
    // Throws LaunchConfigError when the plan cannot run this shape on this device.
    virtual std::unique_ptr<BoundPlan> bind(const Problem& p, const Shape& s) const = 0;
};

struct CandidateModuleSpec {
    std::string key; // content address of the CUBIN
    std::string source;
    ParamValues params;
    std::string cubin; // may be empty when key is loaded or the worker compiles
    std::map<std::string, std::string> lowered;
    std::map<std::string, KernelAbi> abi; // Triton: dynamic shared memory and trailing scratch pointers
};

// An output's tolerance as judged: measured from the reference's fp32 build against its fp64 build.
struct OutputTolerance {
    DType dtype = DType::F32;
    Tolerance stated; // problem.json
    double measuredRelL2 = 0; // fp32 build vs fp64 build, worst over the calibration inputs
    double measuredMaxAbs = 0;
    Tolerance tolerance; // kl::measuredTolerance of the above
};

struct LoadedProblem {
    Problem problem;
    // The fp64-accumulation build (-DKL_ACC=double) is the judge; the default (fp32) build only calibrates the
    // tolerances. Both run on the harness's stream, on the harness arena's buffers.
    std::shared_ptr<Plan> reference;
    std::shared_ptr<Plan> referenceFp32;
    std::map<std::string, OutputTolerance> tolerances; // by output tensor name
    std::shared_ptr<Plan> baseline;
    std::string baselineKind; // "library:cublas_gemm_bf16" or "baseline.cu"
    CompileReport referenceCompile;
    CompileReport baselineCompile;
};

struct VerifyOptions {
    std::vector<Shape> shapes;
    std::vector<bool> heldOut;
    std::uint64_t seed = 1;
    bool cupti = true;
    bool graphCheck = true;
};

struct VerifyOutcome {
    std::vector<ShapeResult> shapes;
    std::vector<VerdictReason> reasons;
    std::size_t kernelRecords = 0;
    bool cuptiChecked = false;
};

struct TimeOptions {
    std::vector<Shape> shapes;
    bool withBaseline = true;
    double maxSecondsPerShape = 2.0;
    double targetRelHalfWidth = 0.01;
    int minSamples = 10;
    int maxSamples = 4000;
    std::string graphMode = "auto"; // auto | always | never
    double graphThresholdUs = 20.0;
    bool recheck = true;
    bool graphTiming = true;
    std::uint64_t seed = 1;
};

struct ShapeTiming {
    ShapeResult result;
    DeviceSample before;
    DeviceSample after;
    bool throttled = false;
    int inputSets = 0;
    int outputSets = 0; // the output rotation period, coprime with inputSets
    int checkedBatches = 0; // timed batches whose every output was re-checked
    std::uint64_t rotationBytes = 0; // total bytes the rotation cycles through
    std::vector<double> candidateSamplesUs;
    std::vector<double> baselineSamplesUs;
};

struct TimeOutcome {
    std::vector<ShapeTiming> shapes;
    std::vector<VerdictReason> reasons;
};

struct TraceOutcome {
    std::vector<KernelRecord> records;
    std::vector<double> eventUs;
    bool cuptiAvailable = false;
};

// One stage of a pipeline run: its problem as loaded, the plan it runs (nullptr: the problem's baseline).
struct PipelineStageRun {
    const LoadedProblem* problem = nullptr;
    std::shared_ptr<Plan> impl;
    std::string implLabel = "baseline"; // StageImpl::describe()
    bool differsFromBaseline = false;
};

struct PipelineOptions {
    std::vector<Shape> shapes; // the pipeline's shapes
    std::uint64_t seed = 1;
    double maxSecondsPerShape = 2.0;
    double targetRelHalfWidth = 0.01;
    int minSamples = 10;
    int maxSamples = 2000;
    int stageSamples = 24; // rounds of each stage alone
};

class Engine {
public:
    Engine(); // creates the context on device KL_DEVICE (default 0); throws CudaError
    ~Engine();

    const DeviceInfo& device() const { return m_device; }
    NvrtcCompiler& compiler() { return *m_compiler; }
    DeviceSample sample() const { return m_nvml.latest(); }

    const LoadedProblem& loadProblem(
        const Problem& p, const std::string& referenceSource, const std::string& baselineSource);
    const LoadedProblem* problem(const std::string& name) const;

    // Loads (or finds) a candidate's module. Returns its compile report (cacheHit when already loaded).
    std::shared_ptr<Plan> candidatePlan(
        const CandidateModuleSpec& spec, CompileReport* report, std::string* key = nullptr);

    VerifyOutcome verify(const LoadedProblem& lp, const Plan& candidate, const VerifyOptions& o);
    TimeOutcome time(const LoadedProblem& lp, const Plan& candidate, const TimeOptions& o);
    TraceOutcome trace(const LoadedProblem& lp, const Plan& candidate, const Shape& s, int launches);
    // The pipeline op: `runs` parallel to p's stages. Judged (kl::judgePipeline) before it returns.
    PipelineResult runPipeline(const Pipeline& p, const std::vector<PipelineStageRun>& runs, const PipelineOptions& o);

    // The stream of the candidate's and the baseline's launches.
    CUstream stream() const { return m_stream; }
    // One buffer per tensor and workspace of `bound` in the candidate arena (until the next operation), inputs
    // filled as inputs and the other tensors with values (seed + the tensor's index): for a run outside
    // verification and timing, such as the profile op's counter run.
    BufferMap filledBuffers(const Problem& p, const Shape& s, const BoundPlan& bound, std::uint64_t seed);

private:
    void measureCopyBandwidth();
    void calibrateTolerances(LoadedProblem& lp);
    std::vector<Tolerance> outputTolerances(const LoadedProblem& lp, const std::vector<std::string>& names) const;
    std::shared_ptr<Plan> compilePlan(const std::string& source, const ParamValues& params, const std::string& name,
        CompileReport* report, std::string* key = nullptr, const std::vector<std::string>& extraFlags = {});
    // Orders `to` after everything enqueued on `from` so far.
    void handoff(CUstream from, CUstream to);
    // Untimed, after a batch's poisoning: reads 2 x L2 of the harness's own memory, so the poison's dirty lines are
    // written back now instead of during the batch's timed launches. It adds into the 64-bit word at slot.
    void evictDirtyL2(CUstream s, CUdeviceptr slot);

    CUdevice m_dev = 0;
    CUcontext m_ctx = nullptr; // the primary context (cuBLAS shares it)
    CUstream m_stream = nullptr; // the candidate's and the baseline's launches
    CUstream m_hstream = nullptr; // references, compares, calibration
    std::vector<CUevent> m_handoffEvents[2]; // recorded on the candidate's, the harness's stream
    std::size_t m_handoffNext[2] = { 0, 0 };
    DeviceInfo m_device;
    std::unique_ptr<NvrtcCompiler> m_compiler;
    HarnessKernels m_harness;
    NvmlMonitor m_nvml;
    std::map<std::string, LoadedProblem> m_problems;
    std::map<std::string, std::shared_ptr<Plan>> m_modules; // by CUBIN key
    std::vector<std::string> m_moduleOrder;
    void* m_cublas = nullptr;
    CUdeviceptr m_cublasWorkspace = 0;
    CUdeviceptr m_l2Evict = 0; // evictDirtyL2's buffer, 2 x L2; 0 when KL_L2_EVICT=0 turns the eviction off
    std::uint64_t m_l2EvictBytes = 0;

    // Candidate memory: slabs behind unmapped guards, re-placed for every shape so addresses change per call.
    // Harness memory: its own reservation, mapped at a random offset that changes per call.
    GuardedArena m_cand;
    HarnessArena m_hmem;
    std::mt19937_64 m_rng;
    std::uint64_t m_arenaNeed = 0;
    void arenaReserve(std::uint64_t bytes);
    void arenaReset();
    CUdeviceptr arenaAlloc(std::uint64_t bytes); // one buffer in its own guarded mapping, ending at the guard
    // Maps a slab of `sets` buffers in the candidate arena; the caller fills its canaries.
    CUdeviceptr mapSlab(const SlabLayout& l);
};

} // namespace kl::worker
