#include "kernels/pipeline_runner.h"

#include "core/errors.h"
#include "core/session_store.h"

#include <set>

namespace fs = std::filesystem;

namespace kl {

std::vector<wire::PipelineStageWire> pipelineStageWires(const Pipeline& p)
{
    std::vector<wire::PipelineStageWire> out;
    for (std::size_t i = 0; i < p.stages.size(); ++i) {
        const PipelineStage& st = p.stages[i];
        const std::string where = p.folder + "/pipeline.json stages[" + std::to_string(i) + "] (" + st.name + ")";
        wire::PipelineStageWire w;
        w.impl = stageImplKindName(st.impl.kind);
        w.label = st.impl.describe();
        if (st.impl.kind == StageImpl::Kind::Candidate) {
            fs::path dir = st.impl.session;
            if (dir.is_relative() && !p.folder.empty())
                dir = fs::path(p.folder) / dir;
            const Session s = SessionStore::load(dir);
            if (s.problemName != st.problemName)
                throw InputError(where + ": session " + dir.string() + " tunes problem " + s.problemName + ", not "
                    + st.problemName);
            if (!s.tree.contains(st.impl.candidate))
                throw InputError(where + ": session " + dir.string() + " has no candidate " + st.impl.candidate);
            const Candidate& c = s.tree.at(st.impl.candidate);
            if (c.status != CandidateStatus::Accepted)
                throw InputError(where + ": candidate " + c.id + " of " + dir.string() + " is " + statusName(c.status)
                    + ", not accepted");
            wire::CandidateWire cw;
            cw.source = c.source;
            cw.params = c.params;
            w.candidate = std::move(cw); // compiled by the worker for its own device
        }
        out.push_back(std::move(w));
    }
    return out;
}

wire::PipelineRequest pipelineRequest(const Pipeline& p, const PipelineRunOptions& o)
{
    wire::PipelineRequest req;
    req.pipeline = toJson(p);
    req.stages = pipelineStageWires(p);
    req.shapes = o.shapes.empty() ? p.space.tuningShapes : o.shapes;
    for (const auto& s : req.shapes)
        if (std::string why; !p.space.shapeIsValid(s, &why))
            throw InputError("shape " + s.label() + " does not fit pipeline " + p.name + ": " + why);
    req.seed = o.seed;
    req.maxSecondsPerShape = o.maxSecondsPerShape;
    req.targetRelCi = o.targetRelCi;
    req.minSamples = o.minSamples;
    return req;
}

PipelineResult runPipelineOnWorker(const Pipeline& p, const PipelineRunOptions& o, WorkerClient& client)
{
    return runPipelineOnWorker(p, pipelineRequest(p, o), o.timeoutSeconds, client);
}

PipelineResult runPipelineOnWorker(
    const Pipeline& p, const wire::PipelineRequest& req, double timeoutSeconds, WorkerClient& client)
{
    std::set<std::string> loaded;
    for (const auto& st : p.stages) {
        if (!loaded.insert(st.problemName).second)
            continue;
        wire::LoadProblemRequest load;
        load.problem = st.problem;
        load.referenceSource = readFile(fs::path(st.problem.folder) / st.problem.referenceFile);
        load.baselineSource = readFile(fs::path(st.problem.folder) / st.problem.baselineFile);
        const auto r = client.addSetup(wire::toJson(load));
        if (!r.ok())
            throw std::runtime_error("load_problem " + st.problemName + " failed: " + r.error);
    }
    const auto reply = client.call(req, timeoutSeconds);
    if (!reply.ok())
        throw std::runtime_error("the worker's pipeline op failed: " + reply.reply.error);
    if (!reply.value->ran) {
        std::string log;
        for (const auto& c : reply.value->compiles)
            if (!c.ok)
                log = c.log;
        throw std::runtime_error("a candidate stage of pipeline " + p.name + " did not compile on the worker: " + log);
    }
    return reply.value->result;
}

} // namespace kl
