#pragma once
// What the loop needs from the harness. kernels/ implements it with the GPU worker; tests use a
// deterministic evaluator written for them. The loop calls compile() from its compile pool ahead of
// evaluate(), which runs on the one thread that owns the device.
#include "core/cancel.h"
#include "core/candidate.h"
#include "core/device.h"
#include "core/evaluation.h"
#include "core/problem.h"

#include <map>
#include <optional>
#include <set>
#include <string>

namespace kl {

// The session's current best, so the referee judges a new result against it (physics.suspicious-jump,
// physics.single-shape-speedup). currentBestOf (core/current_best.h) derives it from a session.
struct CurrentBest {
    double objective = 0;
    std::map<std::string, double> shapeSpeedups; // the best's speedup by Shape::label()
    double reviewJumpFactor = 2.0; // SessionSettings::reviewJumpFactor
    // Sources of accepted candidates: a pure parameter change of one is not judged shape by shape.
    std::set<std::string> acceptedSources;
};

struct EvaluateOptions {
    bool timeBaseline = true; // interleave the baseline for speedups with confidence intervals
    bool heldOutShapes = true; // draw held-out shapes from the validity range
    int heldOutCount = 4;
    double maxSecondsPerShape = 2.0;
    std::uint64_t seed = 0; // 0: fresh from the OS
    Fidelity fidelity; // a screen times fewer samples and shapes (the loop sets it from Candidate::fidelity)
    std::optional<CurrentBest> best; // none: no accepted candidate yet (or not in a session)
    // The best measured on each GPU model (MeasuredOn::gpu): an evaluator with GPUs of several models judges a
    // result against the best of the model that measures it, never another model's (none there: no best).
    std::map<std::string, CurrentBest> bestByGpu;
    // Non-empty: heldOutCount held-out shapes are drawn inside each of these regimes and the first
    // timedHeldOutPerRegime random ones of each are timed against the baseline too, so that a regime's winner is
    // checked on its whole regime. Empty: drawn over the whole range and only verified.
    std::vector<Regime> regimes {};
    int timedHeldOutPerRegime = 2;
};

class Evaluator {
public:
    virtual ~Evaluator() = default;
    virtual const DeviceInfo& device() const = 0;
    virtual const Problem& problem() const = 0;
    // Thread-safe; may run in parallel with itself and with evaluate().
    virtual CompileReport compile(const Candidate& c) = 0;
    // Verification, referee checks and timing. Never throws for a bad candidate: a crash, hang or
    // compile error is a verdict.
    virtual Evaluation evaluate(const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel) = 0;
    // The device that took a measurement (Evaluation::measuredOn), which keys it for reuse; none when this evaluator
    // has no GPU of that model. A pool answers for each of its GPUs.
    virtual std::optional<DeviceInfo> deviceFor(const MeasuredOn& m) const
    {
        if (m.gpu.empty() || m.gpu == device().name)
            return device();
        return std::nullopt;
    }
};

} // namespace kl
