#include "kernels/worker/profile_op.h"

#include "kernels/worker/cuda_check.h"
#include "kernels/worker/cupti_kernel_log.h"

#ifdef KL_WORKER_HAVE_RANGE_PROFILER
#include "profiler/cupti/range_profiler.h"
#endif

#include <algorithm>
#include <cstdlib>
#include <iterator>

namespace kl::worker {

namespace {

    // One run of the plan on freshly filled inputs (after a warm-up run) under the range profiler.
    void measureSol(Engine& engine, const Problem& p, const Plan& plan, const Shape& s, PlanProfile& out)
    {
        const auto bound = plan.bind(p, s);
        const CUstream stream = engine.stream();
        const BufferMap buffers = engine.filledBuffers(p, s, *bound, 991);
        bound->run(stream, buffers); // loads lazily loaded code and warms the clocks outside the counters
        KL_CU(cuCtxSynchronize());
#ifdef KL_WORKER_HAVE_RANGE_PROFILER
        const prof::cupti::RangeProfile rp = prof::cupti::profileKernels([&] { bound->run(stream, buffers); });
        out.solAvailable = rp.available;
        out.solNote = rp.unavailableReason;
        out.solPasses = static_cast<int>(rp.passes);
        out.sol = rp.kernels;
        if (rp.available && rp.kernels.empty())
            out.solNote = "the plan launched no kernel the range profiler could see";
#else
        out.solAvailable = false;
        out.solNote = solUnavailableReason();
#endif
    }

    PlanProfile profileOne(Engine& engine, const LoadedProblem& lp, const Plan& plan, const std::string& role,
        const Shape& s, const ProfileOpOptions& o, ProfileReport& report)
    {
        PlanProfile pp;
        pp.role = role;
        pp.label = role == "baseline" ? lp.baselineKind : plan.label();
        if (o.trace) {
            // Without CUPTI the runs still give CUDA-event times per run, only no kernel records. The first run after
            // CUPTI switches activity on waits milliseconds before its kernel starts (seen on the H200: 3.6 ms), so
            // one more run is traced and dropped, and the timeline shows the plan's steady state.
            const TraceOutcome tr = engine.trace(lp, plan, s, o.launches + 1);
            pp.launches = o.launches;
            pp.eventUs.assign(
                tr.eventUs.begin() + std::min<std::ptrdiff_t>(1, std::ssize(tr.eventUs)), tr.eventUs.end());
            pp.records = tr.records;
            std::sort(pp.records.begin(), pp.records.end(),
                [](const KernelRecord& a, const KernelRecord& b) { return a.startNs < b.startNs; });
            if (!pp.records.empty() && pp.records.size() % static_cast<std::size_t>(o.launches + 1) == 0) {
                const auto perRun
                    = static_cast<std::ptrdiff_t>(pp.records.size() / static_cast<std::size_t>(o.launches + 1));
                pp.records.erase(pp.records.begin(), pp.records.begin() + perRun);
            }
            if (o.launches > 0)
                pp.kernelsPerRun = static_cast<int>(pp.records.size()) / o.launches;
            if (report.traceAvailable && pp.records.size() % static_cast<std::size_t>(std::max(o.launches, 1)) != 0)
                report.traceNote += role + ": " + std::to_string(pp.records.size()) + " kernel records for "
                    + std::to_string(o.launches) + " runs (records were dropped or a run varied). ";
        }
        if (!o.sol) {
            pp.solNote = "not requested";
        } else if (const std::string why = solUnavailableReason(); !why.empty()) {
            pp.solNote = why;
        } else {
            measureSol(engine, lp.problem, plan, s, pp);
        }
        // Counters come in launch order; so do the first run's records: name the ranges after the kernels.
        for (std::size_t i = 0; i < pp.sol.size() && i < pp.records.size() && static_cast<int>(i) < pp.kernelsPerRun;
             ++i)
            pp.sol[i].name = pp.records[i].name;
        return pp;
    }

} // namespace

std::string solUnavailableReason()
{
#if defined(KL_WORKER_HAVE_RANGE_PROFILER)
    if (std::getenv("KL_NO_CUPTI"))
        return "CUPTI is switched off in this worker (KL_NO_CUPTI is set): no performance counters";
    return {};
#elif defined(KL_WORKER_HAVE_CUPTI)
    return "kloop-worker was built without CUPTI's range profiler (the profiler module was skipped): no performance "
           "counters";
#else
    return "kloop-worker was built without CUPTI: no performance counters";
#endif
}

ProfileReport profilePlans(
    Engine& engine, const LoadedProblem& lp, const Plan& candidate, const Shape& s, const ProfileOpOptions& o)
{
    ProfileReport report;
    report.shape = s;
    report.traceAvailable = o.trace && CuptiKernelLog::instance().available();
    if (!o.trace)
        report.traceNote = "not requested";
    else if (!report.traceAvailable) {
        std::string why = CuptiKernelLog::instance().error();
        if (why.empty())
            why = std::getenv("KL_NO_CUPTI") ? "CUPTI is switched off in this worker (KL_NO_CUPTI is set)"
                                             : "CUPTI activity tracing is unavailable";
        report.traceNote = "no kernel records: " + why;
    }
    report.plans.push_back(profileOne(engine, lp, *lp.baseline, "baseline", s, o, report));
    report.plans.push_back(profileOne(engine, lp, candidate, "candidate", s, o, report));
    return report;
}

} // namespace kl::worker
