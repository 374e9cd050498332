#include "kernels/plan_profile.h"

#include "core/candidate.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/worker_protocol.h"

#include <stdexcept>

namespace kl {

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
