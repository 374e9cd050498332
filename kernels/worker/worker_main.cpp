// kloop-worker: owns the CUDA context and answers the typed JSON-lines requests of kernels/worker_protocol.h on
// stdin/stdout (kernels/HARNESS.md); the loop itself is kernels/worker_serve. Anything a library prints goes to
// stderr: stdout carries only protocol lines.
#include "core/errors.h"
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/engine.h"
#include "kernels/worker/profile_op.h"
#include "kernels/worker_serve.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <unistd.h>

namespace {

namespace wire = kl::wire;

kl::worker::CandidateModuleSpec moduleSpec(const wire::CandidateWire& c)
{
    kl::worker::CandidateModuleSpec m;
    m.key = c.key;
    m.source = c.source;
    m.params = c.params;
    m.cubin = c.cubin.value_or(std::string());
    m.lowered = c.lowered;
    m.abi = c.abi;
    return m;
}

std::string hostName()
{
    char buf[256] = {};
    return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string();
}

class EngineHandler final : public wire::WorkerHandler {
public:
    explicit EngineHandler(kl::worker::Engine& engine)
        : m_engine(engine)
    {
    }

    wire::HelloReply hello(const wire::HelloRequest&) override
    {
        wire::HelloReply r;
        r.protocol = wire::kProtocolVersion;
        r.workerVersion = wire::softwareVersion();
        r.device = m_engine.device();
        r.pid = static_cast<long>(::getpid());
        r.host = hostName();
        r.cupti = kl::worker::CuptiKernelLog::instance().available();
        r.sample = m_engine.sample();
        return r;
    }

    wire::SampleReply sample(const wire::SampleRequest&) override { return { m_engine.sample() }; }

    wire::LoadProblemReply loadProblem(const wire::LoadProblemRequest& req) override
    {
        const auto& lp = m_engine.loadProblem(req.problem, req.referenceSource, req.baselineSource);
        wire::LoadProblemReply r;
        r.problem = lp.problem.name;
        r.baselineKind = lp.baselineKind;
        r.referenceCompile = lp.referenceCompile;
        r.baselineCompile = lp.baselineCompile;
        // Each output's tolerance as judged, and what it was derived from (kernels/HARNESS.md, "Measured tolerance").
        for (const auto& [name, t] : lp.tolerances)
            r.tolerances.push_back(
                { name, kl::dtypeName(t.dtype), t.stated, t.measuredRelL2, t.measuredMaxAbs, t.tolerance });
        return r;
    }

    wire::CompileReply compile(const wire::CompileRequest& req) override
    {
        wire::CompileReply r;
        (void)m_engine.candidatePlan(moduleSpec(req.candidate), &r.report, &r.key);
        return r;
    }

    wire::VerifyReply verify(const wire::VerifyRequest& req) override
    {
        wire::VerifyReply r;
        const auto& lp = problemOf(req.problem);
        auto plan = m_engine.candidatePlan(moduleSpec(req.candidate), &r.compile);
        if (!plan)
            return r;
        kl::worker::VerifyOptions o;
        o.shapes = req.shapes;
        o.heldOut = req.heldOut;
        o.seed = req.seed;
        o.cupti = req.cupti;
        o.graphCheck = req.graphCheck;
        const auto v = m_engine.verify(lp, *plan, o);
        r.ran = true;
        r.shapes = v.shapes;
        r.reasons = v.reasons;
        r.kernelRecords = static_cast<std::int64_t>(v.kernelRecords);
        r.cuptiChecked = v.cuptiChecked;
        return r;
    }

    wire::TimeReply time(const wire::TimeRequest& req) override
    {
        wire::TimeReply r;
        const auto& lp = problemOf(req.problem);
        auto plan = m_engine.candidatePlan(moduleSpec(req.candidate), &r.compile);
        if (!plan)
            return r;
        kl::worker::TimeOptions o;
        o.shapes = req.shapes;
        o.withBaseline = req.baseline;
        o.maxSecondsPerShape = req.maxSecondsPerShape;
        o.targetRelHalfWidth = req.targetRelCi;
        o.minSamples = req.minSamples;
        o.maxSamples = req.maxSamples;
        o.graphMode = req.graphMode;
        o.recheck = req.recheck;
        o.graphTiming = req.graphTiming;
        o.seed = req.seed;
        const auto t = m_engine.time(lp, *plan, o);
        r.ran = true;
        for (const auto& s : t.shapes) {
            wire::TimedShape w;
            w.result = s.result;
            w.before = s.before;
            w.after = s.after;
            w.throttled = s.throttled;
            w.inputSets = s.inputSets;
            w.outputSets = s.outputSets;
            w.checkedBatches = s.checkedBatches;
            w.rotationBytes = s.rotationBytes;
            if (req.returnSamples) {
                w.candidateSamplesUs = s.candidateSamplesUs;
                w.baselineSamplesUs = s.baselineSamplesUs;
            }
            r.shapes.push_back(std::move(w));
        }
        r.reasons = t.reasons;
        return r;
    }

    wire::TraceReply trace(const wire::TraceRequest& req) override
    {
        wire::TraceReply r;
        const auto& lp = problemOf(req.problem);
        auto plan = m_engine.candidatePlan(moduleSpec(req.candidate), &r.compile);
        if (!plan)
            return r;
        const auto tr = m_engine.trace(lp, *plan, req.shape, req.launches);
        r.ran = true;
        r.records = tr.records;
        r.eventUs = tr.eventUs;
        r.cupti = tr.cuptiAvailable;
        return r;
    }

    wire::ProfileOpReply profile(const wire::ProfileOpRequest& req) override
    {
        wire::ProfileOpReply r;
        const auto& lp = problemOf(req.problem);
        auto plan = m_engine.candidatePlan(moduleSpec(req.candidate), &r.compile);
        if (!plan)
            return r;
        kl::worker::ProfileOpOptions po;
        po.sol = req.sol;
        po.trace = req.trace;
        po.launches = std::clamp(req.launches, 1, 1000);
        r.report = kl::worker::profilePlans(m_engine, lp, *plan, req.shape, po);
        return r;
    }

    wire::PipelineReply pipeline(const wire::PipelineRequest& req) override
    {
        wire::PipelineReply r;
        const kl::Pipeline p = kl::pipelineFromJson(
            req.pipeline, "pipeline request", [&](const std::string& name) { return problemOf(name).problem; });
        if (req.stages.size() != p.stages.size())
            throw kl::InputError("pipeline request: " + std::to_string(req.stages.size()) + " stages for pipeline "
                + p.name + "'s " + std::to_string(p.stages.size()));
        std::vector<kl::worker::PipelineStageRun> runs;
        for (std::size_t i = 0; i < p.stages.size(); ++i) {
            const wire::PipelineStageWire& w = req.stages[i];
            kl::worker::PipelineStageRun run;
            run.problem = &problemOf(p.stages[i].problemName);
            run.implLabel = w.label;
            if (w.impl == "reference") {
                run.impl = run.problem->reference;
                run.differsFromBaseline = true;
            } else if (w.impl == "candidate") {
                kl::CompileReport report;
                run.impl = m_engine.candidatePlan(moduleSpec(*w.candidate), &report);
                r.compiles.push_back(report);
                if (!run.impl)
                    return r;
                run.differsFromBaseline = true;
            }
            runs.push_back(std::move(run));
        }
        kl::worker::PipelineOptions o;
        o.shapes = req.shapes;
        o.seed = req.seed;
        o.maxSecondsPerShape = req.maxSecondsPerShape;
        o.targetRelHalfWidth = req.targetRelCi;
        o.minSamples = req.minSamples;
        o.maxSamples = req.maxSamples;
        o.stageSamples = req.stageSamples;
        r.result = m_engine.runPipeline(p, runs, o);
        r.ran = true;
        return r;
    }

    std::optional<std::string> fatal(const std::exception& e) override
    {
        if (const auto* cuda = dynamic_cast<const kl::worker::CudaError*>(&e); cuda && cuda->sticky())
            return std::string(e.what());
        return std::nullopt;
    }

private:
    const kl::worker::LoadedProblem& problemOf(const std::string& name)
    {
        const auto* lp = m_engine.problem(name);
        if (!lp)
            throw kl::InputError("problem '" + name + "' is not loaded (send load_problem first)");
        return *lp;
    }

    kl::worker::Engine& m_engine;
};

} // namespace

int main()
{
    // Keep the protocol on a private descriptor; route fd 1 to stderr so stray library output cannot corrupt it.
    const int protoFd = ::dup(1);
    std::FILE* protocol = ::fdopen(protoFd, "w");
    ::dup2(2, 1);
    if (!protocol)
        return 2;

    std::unique_ptr<kl::worker::Engine> engine;
    try {
        engine = std::make_unique<kl::worker::Engine>();
    } catch (const std::exception& e) {
        wire::sendStartFailure(protocol, std::string("worker start failed: ") + e.what());
        return 3;
    }
    EngineHandler handler(*engine);
    const int rc = wire::serveWorker(handler, protocol);
    engine.reset();
    return rc;
}
