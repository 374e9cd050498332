#include "kernels/gpu_profiler.h"

#include "core/demangle.h"
#include "core/errors.h"
#include "kernels/gpu_evaluator.h"

#include <algorithm>

namespace kl {

namespace {

    double medianOf(std::vector<double> v)
    {
        if (v.empty())
            return -1;
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        return v[v.size() / 2];
    }

    // One run of the plan, kernel by kernel: the traced median of each launch ordinal, else the counters'.
    std::vector<ProfiledKernel> kernelsOf(const PlanProfile& p)
    {
        std::vector<ProfiledKernel> out;
        const std::size_t n = std::max<std::size_t>(static_cast<std::size_t>(p.kernelsPerRun), p.sol.size());
        for (std::size_t i = 0; i < n; ++i) {
            ProfiledKernel k;
            if (i < p.sol.size()) {
                const SolCounters& s = p.sol[i];
                k.name = s.name;
                k.durationUs = s.durationNs >= 0 ? s.durationNs / 1e3 : -1;
                k.dramPct = s.dramThroughputPct;
                k.smPct = s.smThroughputPct;
                k.occupancyPct = s.achievedOccupancyPct;
            }
            if (p.kernelsPerRun > 0 && i < static_cast<std::size_t>(p.kernelsPerRun) && i < p.records.size()) {
                std::vector<double> d;
                for (std::size_t r = i; r < p.records.size(); r += static_cast<std::size_t>(p.kernelsPerRun))
                    d.push_back(static_cast<double>(p.records[r].endNs - p.records[r].startNs) / 1e3);
                k.durationUs = medianOf(std::move(d));
                k.name = p.records[i].name;
            }
            k.name = demangle(k.name);
            out.push_back(std::move(k));
        }
        return out;
    }

    double runUs(const PlanProfile& p, const std::vector<ProfiledKernel>& kernels)
    {
        double t = 0;
        for (const auto& k : kernels)
            t += std::max(k.durationUs, 0.0);
        if (t <= 0)
            t = medianOf(p.eventUs); // no records and no counters: the CUDA events of the whole run
        return t;
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
        out.kernels = kernelsOf(*c);
        out.candidateUs = runUs(*c, out.kernels);
        if (!c->solAvailable)
            out.note = "no speed-of-light counters: " + c->solNote;
        else if (!c->solNote.empty())
            out.note = c->solNote;
    }
    if (const PlanProfile* b = report.plan("baseline"))
        out.baselineUs = runUs(*b, kernelsOf(*b));
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
