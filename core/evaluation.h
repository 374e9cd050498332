#pragma once
#include "core/device.h"
#include "core/fidelity.h"
#include "core/problem.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kl {

// Why a candidate was rejected, flagged or accepted. rule is a stable identifier ("static.timer-read",
// "dynamic.held-out-shape", "physics.below-roofline", "correctness.rel-l2") so agents and tests can match it.
struct VerdictReason {
    std::string rule;
    std::string message;
    int line = 0; // source line for static rules, 0 otherwise
    bool blocking = true; // false: flag for human review instead of rejecting
};

// A non-blocking referee reason asks for the engineer's review; the loop's own decision records ("decide.*")
// explain a verdict and ask for nothing.
bool isReviewFlag(const VerdictReason& r);
// Whether a reason is the loop's own decision record ("decide.*": slower, not significant, ...), not a verdict of the
// harness or the referee.
bool isLoopDecision(const VerdictReason& r);

struct TimingStats {
    double medianUs = 0;
    double p10Us = 0;
    double p90Us = 0;
    double ciLowUs = 0; // 95% confidence interval of the median
    double ciHighUs = 0;
    int samples = 0;
    bool graphMode = false; // many replays per event pair
    int launchesPerSample = 1;
    int inputSets = 0; // rotating input sets (cold L2 when their total exceeds 2x L2)
    bool throttled = false; // NVML reported power/thermal throttling before or after the measurement
    DeviceSample device; // NVML clocks, temperature, power, throttle reasons at the end of the measurement
};

struct CorrectnessStats {
    double relL2 = 0;
    double maxAbs = 0;
    bool nonFinite = false; // NaN/Inf where the reference has none
    bool fullCoverage = true; // every output element written
    bool canariesIntact = true;
    bool inputsUnchanged = true;
    std::uint64_t seed = 0; // recorded, never shown to agents
    std::string distribution; // "normal", "large", ...
    bool passed = false;
};

struct ShapeResult {
    Shape shape;
    bool heldOut = false; // drawn at random for this check; not shown to agents
    std::vector<CorrectnessStats> checks; // one per value distribution / run order
    bool correct = false;
    std::optional<TimingStats> timing;
    std::optional<TimingStats> baselineTiming; // measured interleaved with the candidate
    double speedup = 0; // baseline median / candidate median
    double speedupCiLow = 0;
    double speedupCiHigh = 0;
    std::optional<TimingStats> graphTiming; // whole launch plan under CUDA-graph replay
    double verifyMs = 0; // the worker's wall time verifying this shape (every check, synchronized); 0: not recorded
};

struct CompileReport {
    bool ok = false;
    std::string log;
    double compileMs = 0;
    bool cacheHit = false;
    struct KernelResources {
        std::string kernel;
        int registers = 0;
        int spillStores = 0;
        int spillLoads = 0;
        int staticSharedBytes = 0;
        int localBytes = 0;
        int maxThreadsPerBlock = 0;
    };
    std::vector<KernelResources> kernels;
};

enum class Verdict { Accepted, Rejected, PendingReview, CompileFailed, Crashed, TimedOut, Correct };
const char* verdictName(Verdict v);
Verdict verdictFromName(const std::string& s);
// Whether the candidate compiled and every launch finished (no crash, no timeout): only then do its shapes hold
// results a decision or a model can use.
bool ranToCompletion(Verdict v);

// Which GPU measured an evaluation: a decision compares only measurements of one GPU model, and a pool's
// leaderboards are kept per model (kloop session show).
struct MeasuredOn {
    std::string worker; // the pool's worker id ("local", "local:1", "ssh:gpu-box", "slurm:gpu#2")
    std::string gpu; // DeviceInfo::name
    std::string uuid; // DeviceInfo::uuid, when the worker reports one
    bool empty() const { return worker.empty() && gpu.empty(); }
};

// One regime's part of an evaluation (problem.json "regimes", session setting "regimes": "problem"): the objective
// over the regime's timed shapes, how many of its shapes were checked, and whether it became the regime's best.
struct RegimeResult {
    std::string name;
    std::string condition; // the problem's expression, recorded so that a session reads without its problem
    double objective = 0; // 0: no timed shape of the regime has a speedup
    double objectiveCiLow = 0;
    double objectiveCiHigh = 0;
    int timedShapes = 0; // visible and held-out shapes inside the regime with a speedup
    int verifiedShapes = 0; // correct shapes inside the regime, held-out included
    bool won = false; // accepted as the regime's new best
};

struct Evaluation {
    std::string candidateId;
    Verdict verdict = Verdict::Rejected;
    std::vector<VerdictReason> reasons;
    CompileReport compile;
    std::vector<ShapeResult> shapes;
    double objective = 0; // e.g. weighted geometric mean speedup over the baseline
    double objectiveCiLow = 0;
    double objectiveCiHigh = 0;
    DeviceSample deviceBefore;
    DeviceSample deviceAfter;
    std::int64_t startedMs = 0;
    std::int64_t finishedMs = 0;
    std::vector<RegimeResult> regimes {}; // empty: one regime (the setting "single", or a session older than regimes)
    MeasuredOn measuredOn; // empty when nothing ran on a GPU (compile failure, pruned, reused from an older store)
    Fidelity fidelity; // what the timing ran: the full protocol or a screen
    double deviceMs = 0; // time the evaluation held the GPU (verification and timing); 0: not recorded
    bool correctEverywhere() const;
};

} // namespace kl
