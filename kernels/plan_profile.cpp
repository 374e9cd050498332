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
    auto reply = evaluator.client().request(
        { { "op", "profile" }, { "problem", problem.name },
            { "candidate", evaluator.candidateRequest(candidate, *module) }, { "shape", wire::toJson(shape) },
            { "sol", request.sol }, { "trace", request.trace }, { "launches", request.launches } },
        request.timeoutSeconds);
    if (!reply.ok())
        throw std::runtime_error("the worker's profile op failed: " + reply.error);
    if (!reply.body.contains("plans")) {
        // The worker could not load the module: its compile report says why.
        report.compile = compileReportFromJson(reply.body.at("compile"), "profile reply.compile");
        report.compile.ok = false;
        return report;
    }
    ProfileReport r = wire::profileReport(reply.body, "profile reply");
    if (!r.compile.ok)
        r.compile = report.compile; // the worker loaded the local CUBIN; its report is the local compile's
    return r;
}

} // namespace kl
