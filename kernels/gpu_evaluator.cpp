#include "kernels/gpu_evaluator.h"

#include "core/errors.h"
#include "core/json_io.h"
#include "core/loop_objective.h"
#include "kernels/referee/referee.h"
#include "kernels/shape_sampler.h"
#include "kernels/triton/triton_compiler.h"
#include "kernels/worker_protocol.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

namespace kl {

namespace {

    std::int64_t nowMs()
    {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count();
    }

    std::string readSource(const Problem& p, const std::string& file)
    {
        const auto path = std::filesystem::path(p.folder) / file;
        std::ifstream in(path);
        if (!in)
            throw InputError(path.string() + ": cannot read");
        std::ostringstream s;
        s << in.rdbuf();
        return s.str();
    }

    VerdictReason makeReason(const std::string& rule, const std::string& message, bool blocking = true)
    {
        VerdictReason r;
        r.rule = rule;
        r.message = message;
        r.blocking = blocking;
        return r;
    }

    void mergeReasons(std::vector<VerdictReason>& into, const std::vector<VerdictReason>& more)
    {
        for (const auto& r : more) {
            const bool seen
                = std::any_of(into.begin(), into.end(), [&](const VerdictReason& x) { return x.rule == r.rule; });
            if (!seen)
                into.push_back(r);
        }
    }

    bool anyBlocking(const std::vector<VerdictReason>& rs)
    {
        return std::any_of(rs.begin(), rs.end(), [](const VerdictReason& r) { return r.blocking; });
    }

    Verdict verdictOf(const std::vector<VerdictReason>& rs)
    {
        return referee::verdictFor(rs, Verdict::Correct);
    }

} // namespace

GpuEvaluator::GpuEvaluator(Problem problem, GpuEvaluatorOptions options)
    : m_problem(std::move(problem))
    , m_options(std::move(options))
{
    m_referenceSource = readSource(m_problem, m_problem.referenceFile);
    m_baselineSource = readSource(m_problem, m_problem.baselineFile);
    m_templateSource = readSource(m_problem, m_problem.templateFile);
    m_compiler = m_options.compiler
        ? m_options.compiler
        : std::make_shared<NvrtcCompiler>(m_options.compileCacheDir, m_options.compileThreads);
    m_client = std::make_unique<WorkerClient>(m_options.worker);
}

GpuEvaluator::~GpuEvaluator() = default;

const DeviceInfo& GpuEvaluator::device() const
{
    // Compile threads ask for the arch while evaluate() holds the client: once known, no lock is taken.
    if (m_deviceReady.load(std::memory_order_acquire))
        return m_device;
    std::lock_guard lock(m_clientMutex);
    if (!m_deviceReady.load(std::memory_order_relaxed)) {
        m_device = m_client->device();
        m_deviceReady.store(true, std::memory_order_release);
    }
    return m_device;
}

std::string GpuEvaluator::arch() const
{
    if (!m_options.arch.empty())
        return m_options.arch;
    return device().arch;
}

Candidate GpuEvaluator::templateCandidate(const ParamValues& params, const std::string& id) const
{
    Candidate c;
    c.id = id;
    c.source = m_templateSource;
    c.params = params.empty() ? parseKernelSpec(m_templateSource).defaults() : params;
    c.author = Author::Tuner;
    return c;
}

Candidate GpuEvaluator::baselineCandidate(const std::string& id) const
{
    Candidate c;
    c.id = id;
    c.source = m_baselineSource;
    c.params = parseKernelSpec(m_baselineSource).defaults();
    c.author = Author::Reference;
    return c;
}

std::optional<CompileJob> GpuEvaluator::jobFor(const Candidate& c, std::string* error) const
{
    CompileJob job;
    job.source = c.source;
    job.params = c.params;
    job.arch = arch();
    job.name = "candidate.cu"; // the log and the PTX's .file name it; cache keys stay independent of candidate ids
    try {
        const KernelSpec spec = parseKernelSpec(c.source, m_problem);
        spec.requireValidParams(c.params);
        for (const auto& l : spec.launches)
            if (std::find(job.kernels.begin(), job.kernels.end(), l.kernel) == job.kernels.end())
                job.kernels.push_back(l.kernel);
        // Unspecified parameters take their defaults so the source always sees every define.
        for (const auto& p : spec.params)
            if (!job.params.count(p.name))
                job.params[p.name] = p.defaultValue;
        if (spec.language == KernelLanguage::Triton)
            prepareTritonJob(job, spec, m_problem);
    } catch (const InputError& e) {
        *error = std::string("annotations: ") + e.what();
        return std::nullopt;
    }
    return job;
}

std::shared_ptr<const CompiledModule> GpuEvaluator::compileModule(const Candidate& c)
{
    std::string error;
    auto job = jobFor(c, &error);
    if (!job) {
        auto m = std::make_shared<CompiledModule>();
        m->report.log = error;
        return m;
    }
    return m_compiler->compile(*job);
}

std::future<std::shared_ptr<const CompiledModule>> GpuEvaluator::compileAsync(const Candidate& c)
{
    std::string error;
    auto job = jobFor(c, &error);
    if (!job) {
        std::promise<std::shared_ptr<const CompiledModule>> p;
        auto m = std::make_shared<CompiledModule>();
        m->report.log = error;
        p.set_value(m);
        return p.get_future();
    }
    return m_compiler->submit(*job);
}

CompileReport GpuEvaluator::compile(const Candidate& c)
{
    return compileModule(c)->report;
}

wire::CandidateWire GpuEvaluator::candidateWire(const Candidate& c, const CompiledModule& m) const
{
    wire::CandidateWire w;
    w.key = m.key;
    w.source = c.source;
    w.params = c.params;
    for (const auto& p : parseKernelSpec(c.source).params)
        if (!w.params.count(p.name))
            w.params[p.name] = p.defaultValue;
    if (!m.cubin.empty()) // none: the worker compiles it (or has it under its key)
        w.cubin = m.cubin;
    w.lowered = m.loweredNames;
    w.abi = m.abi;
    return w;
}

nlohmann::json GpuEvaluator::candidateRequest(const Candidate& c, const CompiledModule& m) const
{
    return wire::toJson(candidateWire(c, m));
}

void GpuEvaluator::prepareWorker()
{
    if (m_problemLoaded)
        return;
    wire::LoadProblemRequest req;
    req.problem = m_problem;
    req.referenceSource = m_referenceSource;
    req.baselineSource = m_baselineSource;
    auto r = m_client->addSetup(wire::toJson(req));
    if (!r.ok())
        throw std::runtime_error("load_problem failed: " + r.error);
    m_problemLoaded = true;
}

Evaluation GpuEvaluator::evaluate(const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel)
{
    Evaluation e;
    e.candidateId = c.id;
    e.startedMs = nowMs();
    m_lastOutcome = WorkerOutcome::Fine;
    e.fidelity = opt.fidelity;
    std::optional<std::chrono::steady_clock::time_point> onDeviceSince; // from the first request to the worker
    auto finish = [&](Verdict v) {
        e.verdict = v;
        e.finishedMs = nowMs();
        if (onDeviceSince)
            e.deviceMs
                = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - *onDeviceSince).count();
        return e;
    };

    if (m_options.staticChecks) {
        mergeReasons(e.reasons, referee::checkSource(c.source, m_problem));
        if (anyBlocking(e.reasons))
            return finish(Verdict::Rejected); // never compiled, never run
    }
    try {
        (void)arch(); // starts the worker when the arch is not given: no GPU is a harness fault, not a compile error
    } catch (const std::exception& ex) {
        m_lastOutcome = WorkerOutcome::Unavailable;
        e.reasons.push_back(makeReason("harness.worker-unavailable", ex.what()));
        return finish(Verdict::Rejected);
    }
    std::shared_ptr<const CompiledModule> mod;
    const bool onWorker = m_options.compileOnWorker && detectLanguage(c.source) != KernelLanguage::Triton;
    if (!onWorker) {
        try {
            mod = compileModule(c);
        } catch (const std::exception& ex) {
            e.compile.log = ex.what();
            e.reasons.push_back(makeReason("compile.error", ex.what()));
            return finish(Verdict::CompileFailed);
        }
        e.compile = mod->report;
        if (m_options.ptxChecks && !mod->ptx.empty()) {
            mergeReasons(e.reasons,
                referee::checkPtx(mod->ptx, m_problem, parseKernelSpec(c.source),
                    detectLanguage(c.source) == KernelLanguage::Triton ? "candidate.py" : "candidate.cu"));
            if (mod->report.ok && anyBlocking(e.reasons))
                return finish(Verdict::Rejected); // compiled, never run
        }
        if (!mod->report.ok) {
            e.reasons.push_back(makeReason("compile.error", "the candidate does not compile (see the compile log)"));
            return finish(Verdict::CompileFailed);
        }
    }
    if (cancel.cancelled())
        return finish(Verdict::Rejected);

    std::uint64_t seed = opt.seed;
    if (seed == 0)
        seed = (static_cast<std::uint64_t>(std::random_device {}()) << 32) ^ std::random_device {}();

    std::lock_guard lock(m_clientMutex);
    try {
        prepareWorker();
        m_client->ensureStarted();
    } catch (const std::exception& ex) {
        m_lastOutcome = WorkerOutcome::Unavailable;
        e.reasons.push_back(makeReason("harness.worker-unavailable", ex.what()));
        return finish(Verdict::Rejected);
    }
    if (!m_deviceReady.load(std::memory_order_acquire)) {
        m_device = m_client->device();
        m_deviceReady.store(true, std::memory_order_release);
    }

    e.measuredOn = { m_client->options().name, m_device.name, m_device.uuid };
    onDeviceSince = std::chrono::steady_clock::now();
    auto failFromReply = [&](const WorkerClient::Reply& r, const std::string& phase) {
        if (r.status == WorkerClient::Status::Lost || (r.status == WorkerClient::Status::Crashed && !r.fatal))
            m_lastOutcome = WorkerOutcome::Lost;
        if (r.status == WorkerClient::Status::Lost) {
            e.reasons.push_back(makeReason(
                "worker.lost", phase + ": " + r.error + "; nothing it measured is kept and it will be restarted"));
            return finish(Verdict::Crashed);
        }
        if (r.status == WorkerClient::Status::Crashed) {
            e.reasons.push_back(
                makeReason("worker.crashed", phase + ": the worker died (" + r.error + "); it was restarted"));
            return finish(Verdict::Crashed);
        }
        if (r.status == WorkerClient::Status::TimedOut) {
            e.reasons.push_back(makeReason("worker.timeout", phase + ": " + r.error + "; it was restarted"));
            return finish(Verdict::TimedOut);
        }
        e.reasons.push_back(makeReason("harness.error", phase + ": " + r.error));
        return finish(Verdict::Rejected);
    };

    if (onWorker) {
        wire::CompileRequest compileReq;
        compileReq.candidate = candidateWire(c, CompiledModule {});
        const auto compiled = m_client->call(compileReq, m_options.verifyTimeoutSeconds);
        if (!compiled.ok())
            return failFromReply(compiled.reply, "compilation on the worker");
        auto onHost = std::make_shared<CompiledModule>();
        onHost->report = compiled.value->report;
        onHost->key = compiled.value->key;
        mod = onHost;
        e.compile = mod->report;
        if (!mod->report.ok) {
            e.reasons.push_back(makeReason("compile.error",
                "the candidate does not compile on worker " + m_client->options().name + " (see the compile log)"));
            return finish(Verdict::CompileFailed);
        }
        e.reasons.push_back(makeReason("referee.ptx-unchecked",
            "compiled on worker " + m_client->options().name
                + "'s host (workers.json \"compile\": \"worker\"): the client has no PTX, so the PTX rules did not run",
            false));
    }

    // Visible shapes (verify + tuning), then held-out shapes drawn fresh for this check. A screen verifies only the
    // shapes it times: it only ranks, and the full protocol, which every candidate passes before it is accepted,
    // verifies the rest.
    const std::vector<Shape> timedShapes = screenTuningShapes(m_problem.tuningShapes, opt.fidelity);
    std::vector<Shape> visible = opt.fidelity.screen() ? timedShapes : m_problem.verifyShapes;
    if (m_options.verifyTuningShapes && !opt.fidelity.screen())
        for (const auto& s : m_problem.tuningShapes)
            if (std::find(visible.begin(), visible.end(), s) == visible.end())
                visible.push_back(s);
    std::vector<Shape> heldOut;
    std::vector<Shape> heldOutTimed; // drawn inside a regime, timed to check its winner there
    const std::vector<Shape> extremes = extremeShapes(m_problem); // verified only: timing them checks no regime
    auto drawHeldOut = [&](const Regime* regime, std::uint64_t salt) {
        int timed = 0;
        for (const auto& s : heldOutShapes(m_problem, opt.heldOutCount, seed ^ 0x4E1D07ull ^ salt, true, regime)) {
            if (std::find(visible.begin(), visible.end(), s) != visible.end()
                || std::find(heldOut.begin(), heldOut.end(), s) != heldOut.end())
                continue;
            heldOut.push_back(s);
            const bool extreme = std::find(extremes.begin(), extremes.end(), s) != extremes.end();
            if (regime && !extreme && timed < opt.timedHeldOutPerRegime) {
                heldOutTimed.push_back(s);
                ++timed;
            }
        }
    };
    // A screen leaves the held-out shapes to the full protocol, which every candidate passes before it is accepted.
    const bool drawHeld = opt.heldOutShapes && !opt.fidelity.screen();
    if (drawHeld && opt.regimes.empty())
        drawHeldOut(nullptr, 0);
    if (drawHeld)
        for (std::size_t r = 0; r < opt.regimes.size(); ++r)
            drawHeldOut(&opt.regimes[r], 0x9E3779B97F4A7C15ull * (r + 1));
    wire::VerifyRequest verifyReq;
    verifyReq.problem = m_problem.name;
    verifyReq.candidate = candidateWire(c, *mod);
    verifyReq.shapes = visible;
    verifyReq.heldOut.assign(visible.size(), false);
    verifyReq.shapes.insert(verifyReq.shapes.end(), heldOut.begin(), heldOut.end());
    verifyReq.heldOut.resize(verifyReq.shapes.size(), true);
    verifyReq.seed = seed;
    // A screen's checks are the outputs and inputs only: the CUPTI window (stray launches) and the graph-capture
    // replay are left, like the held-out shapes, to the full protocol every candidate passes before it is accepted.
    verifyReq.cupti = m_options.cupti && !opt.fidelity.screen();
    verifyReq.graphCheck = m_options.graphCheck && !opt.fidelity.screen();

    const auto verify = m_client->call(verifyReq, m_options.verifyTimeoutSeconds);
    if (!verify.ok())
        return failFromReply(verify.reply, "verification");
    e.shapes = verify.value->shapes;
    std::vector<VerdictReason> harnessReasons = verify.value->reasons;
    {
        referee::DynamicObservations obs; // kernel records and graph capture are judged in the worker
        mergeReasons(e.reasons, referee::checkDynamic(e, m_problem, obs));
    }
    mergeReasons(e.reasons, harnessReasons);
    if (anyBlocking(e.reasons) || !e.correctEverywhere())
        return finish(anyBlocking(e.reasons) ? Verdict::Rejected : verdictOf(e.reasons));
    if (cancel.cancelled())
        return finish(Verdict::Rejected);

    wire::TimeRequest timeReq;
    timeReq.problem = m_problem.name;
    timeReq.candidate = verifyReq.candidate;
    timeReq.shapes = timedShapes;
    timeReq.shapes.insert(timeReq.shapes.end(), heldOutTimed.begin(), heldOutTimed.end());
    timeReq.baseline = opt.timeBaseline;
    timeReq.maxSecondsPerShape = opt.maxSecondsPerShape;
    timeReq.targetRelCi = m_options.targetRelCi;
    timeReq.minSamples = m_options.minSamples;
    timeReq.recheck = m_options.recheckTimedOutputs;
    // A screen ranks: its samples are capped, the whole-plan graph replay skipped, and its timed outputs are not
    // re-checked (its verification just checked these shapes; the full protocol re-checks what it times).
    if (opt.fidelity.screen()) {
        timeReq.maxSamples = opt.fidelity.screenSamples;
        timeReq.minSamples = std::min(timeReq.minSamples, timeReq.maxSamples);
        timeReq.graphTiming = false;
        timeReq.recheck = false;
    }
    timeReq.graphMode = m_options.graphMode;
    timeReq.seed = seed ^ 0x7131EDull;
    const double timeout
        = opt.maxSecondsPerShape * 3.0 * static_cast<double>(timeReq.shapes.size()) + m_options.timeTimeoutSlackSeconds;
    const auto time = m_client->call(timeReq, timeout);
    if (!time.ok())
        return failFromReply(time.reply, "timing");
    for (const wire::TimedShape& ts : time.value->shapes) {
        ShapeResult r = ts.result;
        const DeviceSample& before = ts.before;
        const DeviceSample& after = ts.after;
        const bool throttled = ts.throttled;
        for (auto* t : { &r.timing, &r.baselineTiming, &r.graphTiming })
            if (*t) {
                (*t)->throttled = throttled;
                (*t)->device = after;
                (*t)->inputSets = ts.inputSets;
            }
        if (e.deviceAfter.smClockMHz == 0)
            e.deviceBefore = before.available ? before : e.deviceBefore;
        e.deviceAfter = after;
        // Visible and held-out shapes are distinct, so the shape alone finds the verification result it times.
        auto it
            = std::find_if(e.shapes.begin(), e.shapes.end(), [&](const ShapeResult& x) { return x.shape == r.shape; });
        if (it == e.shapes.end()) {
            e.shapes.push_back(r);
            continue;
        }
        it->shape.weight = r.shape.weight;
        it->timing = r.timing;
        it->baselineTiming = r.baselineTiming;
        it->graphTiming = r.graphTiming;
        it->speedup = r.speedup;
        it->speedupCiLow = r.speedupCiLow;
        it->speedupCiHigh = r.speedupCiHigh;
        for (const auto& ch : r.checks)
            it->checks.push_back(ch);
        it->correct = it->correct && r.correct;
        // Recorded either way (timing.throttled, the device samples); only a slowdown beyond the power cap sends
        // the measurement to review (DeviceSample::slowedBeyondPowerCap says why).
        if (before.slowedBeyondPowerCap() || after.slowedBeyondPowerCap())
            mergeReasons(e.reasons,
                { makeReason("measurement.throttled",
                    "the GPU reported throttling (" + throttleText(before.throttleReasons | after.throttleReasons)
                        + ") while timing shape " + r.shape.label(),
                    false) });
    }
    harnessReasons = time.value->reasons;
    {
        referee::DynamicObservations obs;
        mergeReasons(e.reasons, referee::checkDynamic(e, m_problem, obs));
    }
    mergeReasons(e.reasons, harnessReasons);

    if (opt.timeBaseline) {
        std::string why;
        if (auto obj = computeObjective(e, "weighted-geomean-speedup", &why)) {
            e.objective = obj->value;
            e.objectiveCiLow = obj->ciLow;
            e.objectiveCiHigh = obj->ciHigh;
        }
    }
    if (m_options.physicsChecks) {
        referee::PhysicsSettings ps;
        ps.kernelsPerCall = static_cast<int>(parseKernelSpec(c.source).launches.size());
        if (opt.best) {
            ps.bestObjective = opt.best->objective;
            ps.bestShapeSpeedups = opt.best->shapeSpeedups;
            ps.jumpFactor = opt.best->reviewJumpFactor;
            ps.sourceAlreadyAccepted = opt.best->acceptedSources.count(c.source) > 0;
        }
        mergeReasons(e.reasons, referee::checkPhysics(e, m_problem, m_device, ps));
    }
    return finish(verdictOf(e.reasons));
}

} // namespace kl
