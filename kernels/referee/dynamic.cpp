// Turns the harness's GPU observations into named reasons. The harness measures; this decides which rule a
// failure belongs to, so every cheat class gets the same name wherever it is caught.
#include "kernels/referee/referee.h"

#include <algorithm>
#include <cstdio>

namespace kl::referee {
namespace {

    bool startsWith(const std::string& s, const char* p)
    {
        return s.rfind(p, 0) == 0;
    }

    std::string errorText(const CorrectnessStats& c)
    {
        char buf[160];
        std::snprintf(buf, sizeof buf, "rel L2 %.3g, max abs %.3g", c.relL2, c.maxAbs);
        return buf;
    }

    std::string where(const ShapeResult& s, const CorrectnessStats& c)
    {
        // Reasons reach agents' prompts; a held-out shape's dims stay in the evaluation record only.
        return (s.heldOut ? std::string("a held-out shape") : s.shape.label())
            + (c.distribution.empty() ? "" : " [" + c.distribution + "]");
    }

    const CorrectnessStats* findCheck(const ShapeResult& s, const char* distribution)
    {
        for (const CorrectnessStats& c : s.checks)
            if (c.distribution == distribution)
                return &c;
        return nullptr;
    }

    bool anyUntimedPassed(const ShapeResult& s)
    {
        return std::any_of(s.checks.begin(), s.checks.end(),
            [](const CorrectnessStats& c) { return c.passed && !startsWith(c.distribution, check::TimedPrefix); });
    }

} // namespace

bool kernelNameMatches(const std::string& planned, const std::string& observed)
{
    if (planned.empty())
        return false;
    if (observed == planned)
        return true;
    // Demangled: "rmsnorm_kernel(__nv_bfloat16*, ...)" or "void rmsnorm_kernel<...>(...)".
    for (std::size_t pos = observed.find(planned); pos != std::string::npos; pos = observed.find(planned, pos + 1)) {
        const bool startOk = pos == 0 || observed[pos - 1] == ' ' || observed[pos - 1] == ':';
        const std::size_t end = pos + planned.size();
        const bool endOk = end < observed.size() && (observed[end] == '(' || observed[end] == '<');
        if (startOk && endOk)
            return true;
    }
    // Itanium-mangled: _Z14rmsnorm_kernelP13__nv_bfloat16... (length-prefixed name).
    const std::string mangled = std::to_string(planned.size()) + planned;
    return startsWith(observed, ("_Z" + mangled).c_str()) || observed.find("N" + mangled) != std::string::npos;
}

std::vector<VerdictReason> checkDynamic(
    const Evaluation& evaluation, const Problem& /*problem*/, const DynamicObservations& obs)
{
    std::vector<VerdictReason> out;
    bool anyVisibleShapeWrong = false;
    for (const ShapeResult& s : evaluation.shapes)
        if (!s.heldOut
            && std::any_of(s.checks.begin(), s.checks.end(), [](const CorrectnessStats& c) { return !c.passed; }))
            anyVisibleShapeWrong = true;

    for (const ShapeResult& s : evaluation.shapes) {
        const CorrectnessStats* orderA = findCheck(s, check::OrderA);
        for (const CorrectnessStats& c : s.checks) {
            // Memory-safety and integrity facts first: they name the cheat more precisely than the error does.
            if (!c.canariesIntact)
                out.push_back({ rule::Canary,
                    where(s, c)
                        + ": a guard canary around an output or workspace changed "
                          "(write out of bounds)",
                    0, true });
            if (!c.inputsUnchanged)
                out.push_back(
                    { rule::InputModified, where(s, c) + ": an input tensor's hash changed during the call", 0, true });
            if (!c.fullCoverage)
                out.push_back({ rule::Coverage,
                    where(s, c)
                        + ": output elements still hold the poison pattern "
                          "(partial computation)",
                    0, true });
            if (c.nonFinite)
                out.push_back({ rule::NonFinite, where(s, c) + ": NaN or Inf where the reference has none", 0, true });
            if (c.passed || !c.canariesIntact || !c.inputsUnchanged || !c.fullCoverage || c.nonFinite)
                continue;
            if (startsWith(c.distribution, check::TimedPrefix) && anyUntimedPassed(s)) {
                out.push_back({ rule::TimedOutputWrong,
                    where(s, c) + ": the outputs of a timed run are wrong (" + errorText(c)
                        + ") although the check runs passed: the kernel behaves differently while timed",
                    0, true });
            } else if (c.distribution == check::OrderARepeat && orderA && orderA->passed) {
                out.push_back({ rule::StateBetweenLaunches,
                    where(s, c) + ": A' (A's inputs again at fresh addresses, after B) is wrong (" + errorText(c)
                        + ") while A was right: the output depends on an earlier launch or on addresses",
                    0, true });
            } else if (c.distribution == check::OrderB && orderA && orderA->passed) {
                out.push_back({ rule::StateBetweenLaunches,
                    where(s, c) + ": B is wrong (" + errorText(c)
                        + ") right after a correct A: the output replays an earlier launch",
                    0, true });
            } else if (s.heldOut && !anyVisibleShapeWrong) {
                out.push_back({ rule::HeldOutShape,
                    where(s, c) + ": wrong (" + errorText(c)
                        + ") on a shape the agent never saw, while every tuning and verification shape "
                          "passed: the kernel is special-cased to the shapes it was shown",
                    0, true });
            } else {
                out.push_back({ rule::RelL2, where(s, c) + ": " + errorText(c) + " exceeds the tolerance", 0, true });
            }
        }
    }

    if (obs.observedKernelsValid) {
        std::vector<bool> used(obs.observedKernels.size(), false);
        std::string missing;
        for (const std::string& planned : obs.plannedKernels) {
            bool found = false;
            for (std::size_t i = 0; i < obs.observedKernels.size() && !found; ++i) {
                if (!used[i] && kernelNameMatches(planned, obs.observedKernels[i])) {
                    used[i] = true;
                    found = true;
                }
            }
            if (!found)
                missing += (missing.empty() ? "" : ", ") + planned;
        }
        std::string extra;
        for (std::size_t i = 0; i < used.size(); ++i)
            if (!used[i])
                extra += (extra.empty() ? "" : ", ") + obs.observedKernels[i];
        if (!missing.empty() || !extra.empty()) {
            out.push_back({ rule::KernelMismatch,
                "the kernels that ran differ from the launch plan"
                    + (missing.empty() ? std::string() : "; planned but not run: " + missing)
                    + (extra.empty() ? std::string() : "; ran but not planned: " + extra),
                0, true });
        }
    }

    if (obs.graphAttempted && !obs.graphCaptured)
        out.push_back({ rule::GraphCaptureFailed,
            "the launch plan does not capture into a CUDA graph"
                + (obs.graphError.empty() ? std::string() : ": " + obs.graphError),
            0, true });
    else if (obs.graphAttempted && !obs.graphReplayCorrect)
        out.push_back({ rule::GraphCaptureFailed,
            "the launch plan captured into a CUDA graph but replays wrong results"
                + (obs.graphError.empty() ? std::string() : ": " + obs.graphError),
            0, true });
    return out;
}

} // namespace kl::referee
