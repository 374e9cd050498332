#pragma once
// The referee: rules that decide whether a candidate's number can be trusted. Pure functions over
// source text and measured data; the harness (kernels/) calls them, the referee never touches the GPU.
// Every reason carries a stable rule id (see ruleCatalogue()) so agents, the GUI and tests can match it.
// The design note is kernels/REFEREE.md.
#include "core/device.h"
#include "core/evaluation.h"
#include "core/kernel_spec.h"
#include "core/problem.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kl::referee {

// ---- rule ids -------------------------------------------------------------------------------------------
namespace rule {
    inline constexpr const char* MutableGlobal = "static.mutable-global";
    inline constexpr const char* TimerRead = "static.timer-read";
    inline constexpr const char* EarlyExit = "static.early-exit";
    inline constexpr const char* Include = "static.include";
    inline constexpr const char* HostCode = "static.host-code";
    inline constexpr const char* Printf = "static.printf";
    inline constexpr const char* TokenPaste = "static.token-paste";
    inline constexpr const char* MacroExpansion = "static.macro-expansion";
    inline constexpr const char* ShapeSpecialCase = "static.shape-special-case";
    inline constexpr const char* LowerPrecision = "static.lower-precision";
    inline constexpr const char* PtxSpecialRegister = "ptx.special-register";
    inline constexpr const char* PtxEarlyExit = "ptx.early-exit";
    inline constexpr const char* PtxLowerPrecision = "ptx.lower-precision";
    inline constexpr const char* PtxMutableGlobal = "ptx.mutable-global";
    inline constexpr const char* PtxDeviceRuntime = "ptx.device-runtime";
    inline constexpr const char* PtxPdlWithoutWait = "ptx.pdl-without-wait";
    inline constexpr const char* BelowRoofline = "physics.below-roofline";
    inline constexpr const char* SuspiciousJump = "physics.suspicious-jump";
    inline constexpr const char* SingleShapeSpeedup = "physics.single-shape-speedup";
    inline constexpr const char* HeldOutShape = "dynamic.held-out-shape";
    inline constexpr const char* StateBetweenLaunches = "dynamic.state-between-launches";
    inline constexpr const char* TimedOutputWrong = "dynamic.timed-output-wrong";
    inline constexpr const char* KernelMismatch = "dynamic.kernel-mismatch";
    inline constexpr const char* Canary = "dynamic.canary";
    inline constexpr const char* InputModified = "dynamic.input-modified";
    inline constexpr const char* Coverage = "dynamic.coverage";
    inline constexpr const char* RelL2 = "correctness.rel-l2";
    inline constexpr const char* NonFinite = "correctness.non-finite";
    inline constexpr const char* MaxAbs = "correctness.max-abs";
    inline constexpr const char* LaunchFailed = "launch.failed";
    inline constexpr const char* LaunchInvalidConfig = "launch.invalid-config";
    inline constexpr const char* GraphCaptureFailed = "graph.capture-failed";
    inline constexpr const char* WorkerCrashed = "worker.crashed"; // the harness's verdict on a fault or trap
} // namespace rule

enum class RuleStage { Static, Dynamic, Physics };

struct RuleInfo {
    std::string id;
    RuleStage stage = RuleStage::Static;
    bool blocking = true; // false: the candidate goes to human review instead of being rejected
    std::string summary; // one line, shown to agents and in the GUI
};

// Every rule the referee or the harness may report, in a stable order.
const std::vector<RuleInfo>& ruleCatalogue();
const RuleInfo* findRule(const std::string& id);

// ---- static checks: on the candidate source, before compiling ------------------------------------------
// Comments and string literals never trigger identifier rules; string literals are only read as inline PTX
// (timer registers, trap/exit). Shape names are the problem's dims plus the integer parameters of every
// __global__ function (and plain aliases of them). Reasons are sorted by line.
// A Triton candidate (core detectLanguage) gets the Triton rules instead: imports of triton and triton.language
// only, no module-level statements but @triton.jit defs (no host code, no globals), no printing or device asserts,
// no timers, no host-side Python, no formats below the problem's, no exact-shape comparisons (review).
std::vector<VerdictReason> checkSource(const std::string& source, const Problem& problem);
std::vector<VerdictReason> checkTritonSource(const std::string& source, const Problem& problem);

// ---- PTX checks: on the PTX NVRTC produced for the candidate, headers' code included ---------------------
// Judges the compiled code whatever its spelling: special registers that reveal time or launch identity,
// trap/exit/assert, floating-point arithmetic below the problem's formats, writable namespace-scope variables
// (every one is device memory under -default-device), calls out of the module (device launches, heap,
// printf). Reasons carry the candidate's line where the PTX's .loc points into sourceName.
std::vector<VerdictReason> checkPtx(
    const std::string& ptx, const Problem& problem, const std::string& sourceName = "candidate.cu");
// The same, and the rules that depend on how the plan launches each kernel: a pdl=1 kernel touches what the plan
// writes only after griddepcontrol.wait (ptx.pdl-without-wait).
std::vector<VerdictReason> checkPtx(const std::string& ptx, const Problem& problem, const KernelSpec& plan,
    const std::string& sourceName = "candidate.cu");

// Headers a candidate may include (CUDA's own device headers). Exact names, or prefixes ending in '/'.
const std::vector<std::string>& includeAllowList();
bool includeAllowed(const std::string& header);

// ---- physics: on measured data -------------------------------------------------------------------------
struct PhysicsSettings {
    double jumpFactor = 2.0; // SessionSettings::reviewJumpFactor
    std::optional<double> bestObjective; // the current best's objective; none before the first acceptance
    std::map<std::string, double> bestShapeSpeedups; // the current best's speedup by Shape::label(), if known
    // The measured copy bandwidth is itself a measurement: a time is impossible only below floor * slack.
    double floorSlack = 0.9;
    // The part of a working set that L2 can hold (at most its capacity) may be served faster than HBM copy
    // bandwidth; the rest streams from HBM. The harness rotates inputs to keep caches cold, but written
    // outputs and graph replays of tiny shapes may still hit L2.
    double l2BandwidthFactor = 4.0;
    double peakFlops = 0; // FLOP/s for the problem's math, measured; 0: the per-architecture table, else derived
    // Without a measured peak or a table entry: SMs x max SM clock x this. 32768 is above every dense tensor
    // rate up to fp4 on Blackwell, so the derived floor is loose but never wrong.
    double flopsPerClockPerSm = 32768;
    // Every kernel of the plan costs at least this much on top of its work (grid launch and drain, in a
    // CUDA graph). Assumed, below what graphs of empty kernels reach on Hopper (~1 us).
    double minKernelSeconds = 0.5e-6;
    int kernelsPerCall = 1; // launches in the candidate's plan
    // physics.single-shape-speedup: one shape's speedup is at least this many times the median of the
    // others and carries more than singleShapeShare of the total log-speedup gain.
    double singleShapeRatio = 2.0;
    double singleShapeShare = 0.5;
    double minGainForShapeCheck = 1.05; // objective gains below this are not "carried" by anything
    // A pure parameter change of an already-accepted source: its per-shape profile was judged when the
    // source was accepted, so a lopsided gain is the parameter, not a special case (no single-shape flag).
    bool sourceAlreadyAccepted = false;
};

// Dense tensor-core FLOP per clock per SM for the fastest format the problem's tensors allow on this
// architecture (bf16/f16; fp8 when it has fp8 tensors; tf32 for fp32), from NVIDIA's published peaks:
// sm_80 2048 (16-bit), sm_90 4096, sm_100 8192; 0 for an architecture not in the table.
double tensorFlopsPerClockPerSm(const Problem& problem, const DeviceInfo& device);

// Fewest seconds a call of this shape can take on this device: max(memory floor, compute floor) plus the
// plan's launches, times floorSlack. The memory floor is 0 without a byte formula or a measured bandwidth,
// the compute floor 0 without a flop formula or a peak.
double rooflineFloorSeconds(
    const Problem& problem, const Shape& shape, const DeviceInfo& device, const PhysicsSettings& settings);

std::vector<VerdictReason> checkPhysics(
    const Evaluation& evaluation, const Problem& problem, const DeviceInfo& device, const PhysicsSettings& settings);

// ---- dynamic: turns what the harness observed on the GPU into reasons ----------------------------------
// CorrectnessStats::distribution labels the harness writes so the referee can tell checks apart:
namespace check {
    inline constexpr const char* OrderA = "order:A"; // first run on fresh buffers
    inline constexpr const char* OrderB = "order:B"; // a different input set in between
    inline constexpr const char* OrderARepeat = "order:A'"; // A's values again, at fresh addresses
    inline constexpr const char* TimedPrefix = "timed"; // re-check of the outputs of a timed run ("timed:3")
} // namespace check

struct DynamicObservations {
    std::vector<std::string> plannedKernels; // the launch plan's kernel names for one call, in order
    // Kernels CUPTI recorded during one verification call, in order (demangled or mangled names). Empty with
    // observedKernelsValid=false when CUPTI was not available.
    std::vector<std::string> observedKernels;
    bool observedKernelsValid = false;
    bool graphAttempted = false;
    bool graphCaptured = true;
    bool graphReplayCorrect = true;
    std::string graphError;
};

// Reasons from the per-shape checks in the evaluation (failed checks, canaries, coverage, inputs, run order,
// timed re-checks, held-out shapes) and from the observations (kernel records, graph capture).
std::vector<VerdictReason> checkDynamic(
    const Evaluation& evaluation, const Problem& problem, const DynamicObservations& observations);

// True when a CUPTI kernel name (mangled or demangled) is the planned kernel function.
bool kernelNameMatches(const std::string& planned, const std::string& observed);

// ---- verdicts -------------------------------------------------------------------------------------------
// Any blocking reason rejects; otherwise any non-blocking one sends the candidate to review.
Verdict verdictFor(const std::vector<VerdictReason>& reasons, Verdict whenClean = Verdict::Accepted);
bool hasBlocking(const std::vector<VerdictReason>& reasons);

} // namespace kl::referee
