#include "kernels/gpu_profiler.h"

#include "core/errors.h"
#include "kernels/gpu_evaluator.h"

#include <algorithm>

namespace kl {

namespace {

    std::vector<ProfiledKernel> kernelsOf(const std::vector<RunKernel>& run)
    {
        std::vector<ProfiledKernel> out;
        for (const auto& r : run) {
            ProfiledKernel k;
            k.name = r.name;
            k.durationUs = r.durationUs;
            if (r.sol) {
                k.dramPct = r.sol->dramThroughputPct;
                k.smPct = r.sol->smThroughputPct;
                k.occupancyPct = r.sol->achievedOccupancyPct;
            }
            out.push_back(std::move(k));
        }
        return out;
    }

} // namespace

Shape largestTuningShape(const Problem& problem)
{
    const Shape* best = nullptr;
    double bestSize = -1;
    for (const auto& t : problem.tuningShapes) {
        double size = 1;
        for (const auto& [k, v] : t.dims)
            size *= static_cast<double>(v);
        if (size > bestSize) {
            best = &t;
            bestSize = size;
        }
    }
    if (!best)
        throw InputError("problem " + problem.name + " has no tuning shapes to profile on");
    Shape s;
    s.dims = best->dims;
    return s;
}

CandidateProfile candidateProfileFrom(const ProfileReport& report, const CandidateId& id)
{
    CandidateProfile out;
    out.candidateId = id;
    out.shape = report.shape.label();
    if (const PlanProfile* c = report.plan("candidate")) {
        const std::vector<RunKernel> run = kernelsOfOneRun(*c);
        out.kernels = kernelsOf(run);
        out.candidateUs = oneRunUs(*c, run);
        if (!c->solAvailable)
            out.note = "no speed-of-light counters: " + c->solNote;
        else if (!c->solNote.empty())
            out.note = c->solNote;
    }
    if (const PlanProfile* b = report.plan("baseline"))
        out.baselineUs = oneRunUs(*b, kernelsOfOneRun(*b));
    if (!report.traceAvailable)
        out.note += (out.note.empty() ? "" : "; ") + std::string("no kernel records: ") + report.traceNote;
    return out;
}

GpuProfiler::GpuProfiler(GpuEvaluator& evaluator, ProfileRequest request)
    : m_evaluator(evaluator)
    , m_request(request)
{
}

CandidateProfile GpuProfiler::profile(const Candidate& c, const CancelToken& cancel)
{
    if (cancel.cancelled())
        throw std::runtime_error("cancelled");
    const ProfileReport r
        = profileAgainstBaseline(m_evaluator, c, largestTuningShape(m_evaluator.problem()), m_request);
    if (!r.compile.ok)
        throw std::runtime_error("candidate " + c.id + " does not compile for profiling");
    return candidateProfileFrom(r, c.id);
}

} // namespace kl
