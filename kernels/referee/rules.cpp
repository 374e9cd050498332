#include "kernels/referee/referee.h"

#include <algorithm>

namespace kl::referee {

const std::vector<RuleInfo>& ruleCatalogue()
{
    using S = RuleStage;
    static const std::vector<RuleInfo> rules = {
        { rule::MutableGlobal, S::Static, true,
            "mutable __device__/__managed__ globals or function-scope statics: state kept between launches" },
        { rule::TimerRead, S::Static, true,
            "reads a clock (clock(), clock64(), %clock, %globaltimer, cuda::std::chrono)" },
        { rule::EarlyExit, S::Static, true, "ends the grid outside normal control flow (__trap, PTX trap/exit/brkpt)" },
        { rule::Include, S::Static, true, "includes a header outside CUDA's device-header allow-list" },
        { rule::HostCode, S::Static, true,
            "host-side constructs: CUDA runtime/driver calls, <<<>>> launches, device heap (malloc/new), __host__ "
            "code" },
        { rule::Printf, S::Static, true, "device printf: an output channel the harness does not own" },
        { rule::TokenPaste, S::Static, true, "## token pasting, which hides identifiers from the static rules" },
        { rule::MacroExpansion, S::Static, true, "macros that expand beyond 200,000 tokens (a macro bomb)" },
        { rule::ShapeSpecialCase, S::Static, false,
            "branches on a shape dim against a literal that skip work (T == 4096, if (T < 16) return, switch (T))" },
        { rule::LowerPrecision, S::Static, false,
            "arithmetic in a precision below the problem's contract (16-bit math, fp8/fp4, tf32, f16 accumulators)" },
        { rule::PtxSpecialRegister, S::Static, true,
            "the compiled PTX reads a register revealing time or launch identity (%globaltimer, %clock*, %pm*, "
            "%gridid, %current_graph_exec; any special register outside the geometry allow-list)" },
        { rule::PtxEarlyExit, S::Static, true, "the compiled PTX contains trap, exit or brkpt" },
        { rule::PtxLowerPrecision, S::Static, true,
            "the compiled PTX computes in 16-bit float (unless allow-half-math), accumulates in 16-bit, or uses a "
            "format the problem's tensors do not have (fp8/fp4/int8/tf32)" },
        { rule::PtxMutableGlobal, S::Static, true,
            "the compiled PTX writes a namespace-scope (.global) variable or lets its address escape: state "
            "between launches" },
        { rule::PtxDeviceRuntime, S::Static, true,
            "the compiled PTX calls out of the module: device-side launches, parameter buffers, device heap, printf" },
        { rule::PtxPdlWithoutWait, S::Static, true,
            "a kernel launched with pdl=1 touches an output, in-place tensor or workspace on a path without "
            "griddepcontrol.wait (a race with the kernel before it)" },
        { rule::BelowRoofline, S::Physics, true,
            "measured time below the roofline floor (problem bytes / measured copy bandwidth, FLOPs / peak)" },
        { rule::SuspiciousJump, S::Physics, false,
            "objective jumps more than the review factor over the current best" },
        { rule::SingleShapeSpeedup, S::Physics, false, "the speedup is carried by a single shape" },
        { rule::HeldOutShape, S::Dynamic, true, "wrong on a held-out shape drawn from the validity range" },
        { rule::StateBetweenLaunches, S::Dynamic, true,
            "run order A, B, A' disagrees: output depends on earlier launches or on buffer addresses" },
        { rule::TimedOutputWrong, S::Dynamic, true, "the outputs of a timed run are wrong (honest only when checked)" },
        { rule::KernelMismatch, S::Dynamic, true, "the kernels CUPTI recorded differ from the launch plan" },
        { rule::Canary, S::Dynamic, true, "wrote outside an output or workspace buffer (guard canary changed)" },
        { rule::InputModified, S::Dynamic, true, "modified an input tensor" },
        { rule::Coverage, S::Dynamic, true, "left output elements unwritten (poison survived)" },
        { rule::RelL2, S::Dynamic, true, "output differs from the reference beyond the dtype's tolerance" },
        { rule::NonFinite, S::Dynamic, true, "NaN or Inf where the reference has none" },
        { rule::MaxAbs, S::Dynamic, true,
            "an output element differs from the reference beyond the dtype's max abs error" },
        { rule::LaunchFailed, S::Dynamic, true, "a launch of the plan failed (fault, resources) during verification" },
        { rule::LaunchInvalidConfig, S::Dynamic, true,
            "the launch plan's geometry or shared memory exceeds the device's limits for a shape" },
        { rule::GraphCaptureFailed, S::Dynamic, true,
            "the launch plan does not capture into a CUDA graph or replays wrongly under it" },
        { rule::WorkerCrashed, S::Dynamic, true,
            "the worker died running the candidate (a fault, e.g. on an unmapped guard range, or a trap); it was "
            "restarted" },
    };
    return rules;
}

const RuleInfo* findRule(const std::string& id)
{
    const auto& rules = ruleCatalogue();
    const auto it = std::find_if(rules.begin(), rules.end(), [&](const RuleInfo& r) { return r.id == id; });
    return it == rules.end() ? nullptr : &*it;
}

bool hasBlocking(const std::vector<VerdictReason>& reasons)
{
    return std::any_of(reasons.begin(), reasons.end(), [](const VerdictReason& r) { return r.blocking; });
}

Verdict verdictFor(const std::vector<VerdictReason>& reasons, Verdict whenClean)
{
    if (hasBlocking(reasons))
        return Verdict::Rejected;
    if (!reasons.empty())
        return Verdict::PendingReview;
    return whenClean;
}

} // namespace kl::referee
