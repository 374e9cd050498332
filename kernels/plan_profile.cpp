#include "kernels/plan_profile.h"

#include "core/candidate.h"
#include "core/demangle.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/worker_protocol.h"

#include <algorithm>
#include <stdexcept>

namespace kl {

namespace {

    double medianOf(std::vector<double> v)
    {
        if (v.empty())
            return -1;
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        return v[v.size() / 2];
    }

} // namespace

std::vector<RunKernel> kernelsOfOneRun(const PlanProfile& p)
{
    std::vector<RunKernel> out;
    const std::size_t perRun = static_cast<std::size_t>(std::max(p.kernelsPerRun, 0));
    const std::size_t n = std::max(perRun, p.sol.size());
    for (std::size_t i = 0; i < n; ++i) {
        RunKernel k;
        if (i < p.sol.size()) {
            k.sol = &p.sol[i];
            k.name = p.sol[i].name;
            k.durationUs = p.sol[i].durationNs >= 0 ? p.sol[i].durationNs / 1e3 : -1;
        }
        if (i < perRun && i < p.records.size()) {
            std::vector<double> d;
            for (std::size_t r = i; r < p.records.size(); r += perRun)
                d.push_back(static_cast<double>(p.records[r].endNs - p.records[r].startNs) / 1e3);
            k.durationUs = medianOf(std::move(d));
            k.name = p.records[i].name;
        }
        k.name = demangle(k.name);
        out.push_back(std::move(k));
    }
    return out;
}

double oneRunUs(const PlanProfile& p, const std::vector<RunKernel>& kernels)
{
    double t = 0;
    for (const auto& k : kernels)
        t += std::max(k.durationUs, 0.0);
    return t > 0 ? t : medianOf(p.eventUs);
}

const PlanProfile* ProfileReport::plan(const std::string& role) const
{
    for (const auto& p : plans)
        if (p.role == role)
            return &p;
    return nullptr;
}

ProfileReport profileAgainstBaseline(
    GpuEvaluator& evaluator, const Candidate& candidate, const Shape& shape, const ProfileRequest& request)
{
    const Problem& problem = evaluator.problem();
    if (std::string why; !problem.shapeIsValid(shape, &why))
        throw InputError("shape " + shape.label() + " does not fit problem " + problem.name + ": " + why);
    ProfileReport report;
    report.shape = shape;
    const auto module = evaluator.compileModule(candidate);
    report.compile = module->report;
    if (!module->report.ok)
        return report;
    evaluator.prepareWorker();
    wire::ProfileOpRequest req;
    req.problem = problem.name;
    req.candidate = evaluator.candidateWire(candidate, *module);
    req.shape = shape;
    req.sol = request.sol;
    req.trace = request.trace;
    req.launches = request.launches;
    const auto reply = evaluator.client().call(req, request.timeoutSeconds);
    if (!reply.ok())
        throw std::runtime_error("the worker's profile op failed: " + reply.reply.error);
    if (!reply.value->report) {
        // The worker could not load the module: its compile report says why.
        report.compile = reply.value->compile;
        report.compile.ok = false;
        return report;
    }
    ProfileReport r = *reply.value->report;
    if (!r.compile.ok)
        r.compile = report.compile; // the worker loaded the local CUBIN; its report is the local compile's
    return r;
}

} // namespace kl
