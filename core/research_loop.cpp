#include "core/research_loop.h"

#include "core/current_best.h"
#include "core/errors.h"
#include "core/loop_device_limits.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace kl {

namespace {

    CandidateStatus statusForVerdict(Verdict v)
    {
        switch (v) {
        case Verdict::Accepted:
            return CandidateStatus::Accepted;
        case Verdict::PendingReview:
            return CandidateStatus::PendingReview;
        case Verdict::CompileFailed:
            return CandidateStatus::CompileFailed;
        case Verdict::Crashed:
            return CandidateStatus::Crashed;
        case Verdict::TimedOut:
            return CandidateStatus::TimedOut;
        default:
            return CandidateStatus::Rejected;
        }
    }

    bool awaitsEvaluation(CandidateStatus s)
    {
        return s == CandidateStatus::Proposed || s == CandidateStatus::Approved || s == CandidateStatus::Compiling
            || s == CandidateStatus::Verifying || s == CandidateStatus::Timing;
    }

    // The store may hold a partial evaluation (a compile report) for a candidate that was never decided;
    // only a candidate past evaluation counts as recorded.
    bool isRecorded(const Session& s, const CandidateId& id)
    {
        if (!s.evaluations.count(id))
            return false;
        const CandidateStatus st = s.tree.at(id).status;
        if (awaitsEvaluation(st))
            return false;
        if (st == CandidateStatus::PendingReview)
            return s.evaluations.at(id).verdict == Verdict::PendingReview;
        return true;
    }

    int recordedCount(const Session& s)
    {
        int n = 0;
        for (const auto& [id, e] : s.evaluations)
            if (s.tree.contains(id) && isRecorded(s, id))
                ++n;
        return n;
    }

    nlohmann::json compileSummary(const CompileReport& r)
    {
        nlohmann::json kernels = nlohmann::json::array();
        for (const auto& k : r.kernels)
            kernels.push_back({ { "kernel", k.kernel }, { "registers", k.registers }, { "spillStores", k.spillStores },
                { "staticSharedBytes", k.staticSharedBytes } });
        return { { "ok", r.ok }, { "compileMs", r.compileMs }, { "cacheHit", r.cacheHit }, { "kernels", kernels },
            { "log", r.log.substr(0, 2000) } };
    }

    // A recorded evaluation carries the loop's decision; this recovers what the evaluator said, so a repeat of
    // the same configuration is decided afresh against the current best without measuring it again.
    Evaluation rawFromRecorded(Evaluation e)
    {
        std::vector<VerdictReason> kept;
        for (const VerdictReason& r : e.reasons)
            if (!isLoopDecision(r))
                kept.push_back(r);
        e.reasons = kept;
        if (ranToCompletion(e.verdict)) {
            bool blocking = false;
            bool flag = false;
            for (const VerdictReason& r : kept)
                (r.blocking ? blocking : flag) = true;
            e.verdict = blocking ? Verdict::Rejected : flag ? Verdict::PendingReview : Verdict::Correct;
        }
        e.objective = e.objectiveCiLow = e.objectiveCiHigh = 0;
        e.regimes.clear();
        return e;
    }

    // A screen ranks configurations for promotion; only a full-protocol evaluation may become the session's best
    // or wait for a review as one. What the screen measured stays recorded (objective, reasons).
    Decision screenDecision(const Evaluation& raw, Decision d)
    {
        if (!raw.fidelity.screen())
            return d;
        if (d.verdict == Verdict::Accepted || d.verdict == Verdict::PendingReview) {
            d.verdict = Verdict::Correct;
            d.improves = false;
            d.reasons.push_back({ "decide.screen",
                "screened (" + raw.fidelity.label()
                    + "): correct, its timing ranks it for promotion; only the full protocol can make it the best",
                0, false });
        }
        return d;
    }

    std::string firstLines(const std::string& text, std::size_t maxChars)
    {
        std::string s = text.substr(0, maxChars);
        if (text.size() > maxChars)
            s += " ...";
        return s;
    }

    std::string fmtMinutes(double m)
    {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%g", m);
        return buf;
    }

} // namespace

ResearchLoop::ResearchLoop(SessionStore& store, Evaluator& evaluator, Agent& agent, LoopOptions options)
    : m_store(store)
    , m_evaluator(evaluator)
    , m_agent(agent)
    , m_options(std::move(options))
{
    m_options.compileThreads = std::max(1, m_options.compileThreads);
    m_options.pipelineDepth = std::max(1, m_options.pipelineDepth);
    m_options.deviceThreads = std::max(1, m_options.deviceThreads);
    // Every device thread needs a compiled candidate waiting, or the pool's GPUs idle behind NVRTC.
    if (m_options.deviceThreads > 1)
        m_options.pipelineDepth = std::max(m_options.pipelineDepth, m_options.deviceThreads + 1);
    if (session().settings.regimes == "problem")
        m_regimes = m_evaluator.problem().regimes;
    m_options.evaluate.regimes = m_regimes;
    restoreFromStore();
}

ResearchLoop::~ResearchLoop() = default;

void ResearchLoop::restoreFromStore()
{
    const Session& s = session();
    m_measured.clear();
    const std::optional<CandidateId> best = bestAcceptedId(s);
    std::optional<ObjectiveValue> bestValue;
    if (best) {
        const Evaluation& e = s.evaluations.at(*best);
        bestValue = ObjectiveValue { e.objective, e.objectiveCiLow, e.objectiveCiHigh };
    }
    int since = 0;
    std::map<std::string, ObjectiveValue> bestByGpu;
    std::map<std::string, CandidateId> bestIdByGpu;
    for (const CandidateId& id : s.tree.order()) {
        if (!isRecorded(s, id))
            continue;
        const auto it = s.evaluations.find(id);
        const Candidate& c = s.tree.at(id);
        if (c.status == CandidateStatus::Accepted && it->second.objective > 0) { // each beat its model's best before
            bestByGpu[gpuModelOf(it->second)]
                = ObjectiveValue { it->second.objective, it->second.objectiveCiLow, it->second.objectiveCiHigh };
            bestIdByGpu[gpuModelOf(it->second)] = id;
        }
        // Keyed by the GPU that measured it; a model this evaluator lacks is never reused for another.
        if (const auto measuredBy = m_evaluator.deviceFor(it->second.measuredOn))
            m_measured[measurementKeyFor(c, m_evaluator.problem(), *measuredBy, m_options.measurementProtocol).digest()]
                = rawFromRecorded(it->second);
        if (!it->second.fidelity.screen())
            ++since;
        if (c.status == CandidateStatus::Accepted && it->second.objective > 0)
            since = 0;
    }
    std::optional<CurrentBest> refereeBest = best ? currentBestOf(s, best) : std::nullopt;
    std::map<std::string, CurrentBest> refereeBestByGpu;
    for (const auto& [gpu, id] : bestIdByGpu)
        if (auto b = currentBestOf(s, id))
            refereeBestByGpu[gpu] = std::move(*b);
    std::vector<std::optional<ObjectiveValue>> regimeBest(m_regimes.size());
    std::vector<std::string> regimeBestId(m_regimes.size());
    for (const RegimeWinner& w : regimeWinners(s))
        for (std::size_t r = 0; r < m_regimes.size(); ++r)
            if (w.winner && m_regimes[r].name == w.regime) {
                regimeBest[r]
                    = ObjectiveValue { w.result.objective, w.result.objectiveCiLow, w.result.objectiveCiHigh };
                regimeBestId[r] = *w.winner;
            }
    std::lock_guard lock(m_mutex);
    m_regimeBest = std::move(regimeBest);
    m_regimeBestId = std::move(regimeBestId);
    m_best = best;
    m_bestValue = bestValue;
    m_bestByGpu = std::move(bestByGpu);
    m_refereeBest = std::move(refereeBest);
    m_refereeBestByGpu = std::move(refereeBestByGpu);
    m_sinceImprovement = since;
}

std::string ResearchLoop::gpuModelOf(const Evaluation& e) const
{
    return kl::gpuModelOf(session(), e);
}

std::optional<CandidateId> ResearchLoop::best() const
{
    std::lock_guard lock(m_mutex);
    return m_best;
}

void ResearchLoop::requestStop(const std::string& reason, bool cancelInFlight)
{
    std::lock_guard lock(m_mutex);
    if (!m_stopRequested) {
        m_stopRequested = true;
        m_stopReason = reason;
    }
    m_agentCancel.cancel();
    if (cancelInFlight) {
        m_dropInFlight = true;
        m_deviceCancel.cancel();
    }
    m_cv.notify_all();
}

void ResearchLoop::pause()
{
    {
        std::lock_guard lock(m_mutex);
        if (m_paused)
            return;
        m_paused = true;
        m_pauseStartedMs = nowMs();
    }
    runCommand([this] { m_store.setState("paused", "paused by the user"); });
}

void ResearchLoop::resume()
{
    {
        std::lock_guard lock(m_mutex);
        if (!m_paused)
            return;
        m_paused = false;
        m_pausedMs += nowMs() - m_pauseStartedMs;
        m_cv.notify_all();
    }
    runCommand([this] { m_store.setState("running", "resumed by the user"); });
}

bool ResearchLoop::isPaused() const
{
    std::lock_guard lock(m_mutex);
    return m_paused;
}

void ResearchLoop::branchFrom(const CandidateId& id, const std::string& why)
{
    runCommand([this, id, why] {
        if (!session().tree.contains(id))
            throw InputError("cannot branch from unknown candidate '" + id + "'");
        m_store.moveHead(id, why);
    });
}

void ResearchLoop::addHypothesis(const std::string& text)
{
    runCommand([this, text] {
        m_store.addHypothesis(Hypothesis { {}, text, Author::Human, nowMs() });
        // A new hypothesis is new work for an agent that had nothing left.
        m_agentExhausted = m_agentWaiting = false;
    });
}

void ResearchLoop::review(const CandidateId& id, bool approved, const std::string& reason)
{
    runCommand([this, id, approved, reason] { reviewNow(id, approved, reason); });
}

void ResearchLoop::runCommand(std::function<void()> cmd)
{
    {
        std::lock_guard lock(m_mutex);
        if (m_running) {
            m_commands.push_back(std::move(cmd));
            m_cv.notify_all();
            return;
        }
    }
    cmd(); // no run() active: the caller is the only writer
}

void ResearchLoop::reviewNow(const CandidateId& id, bool approved, const std::string& reason)
{
    const Session& s = session();
    if (!s.tree.contains(id))
        throw InputError("review: unknown candidate '" + id + "'");
    if (s.tree.at(id).status != CandidateStatus::PendingReview)
        throw InputError(
            "review: candidate '" + id + "' is " + statusName(s.tree.at(id).status) + ", not pending review");
    const bool evaluated = isRecorded(s, id); // before the review changes the status
    std::optional<Evaluation> recordedEval;
    if (evaluated)
        recordedEval = s.evaluations.at(id);
    m_store.recordReview(ReviewDecision { id, approved, reason, nowMs() });
    // A decision changes what the agent can propose (an LLM waits for its outstanding proposal).
    m_agentExhausted = m_agentWaiting = false;
    if (!approved) {
        m_store.setStatus(id, CandidateStatus::Rejected, "rejected by the engineer: " + reason);
        return;
    }
    if (!recordedEval) {
        m_store.setStatus(id, CandidateStatus::Approved, "approved by the engineer: " + reason);
        bool running;
        {
            std::lock_guard lock(m_mutex);
            running = m_running;
        }
        if (running)
            enqueue(s.tree.at(id)); // otherwise the next run() picks it up
        return;
    }
    // Evaluated and flagged: the engineer vouches for it; it still has to beat the best (of some regime).
    Evaluation e = *recordedEval;
    const ObjectiveValue value { e.objective, e.objectiveCiLow, e.objectiveCiHigh };
    if (!m_regimes.empty()) {
        bool won = false;
        {
            std::lock_guard lock(m_mutex);
            for (RegimeResult& r : e.regimes)
                for (std::size_t i = 0; i < m_regimes.size(); ++i)
                    if (r.name == m_regimes[i].name && r.objective > 0) {
                        r.won = compareWithBest({ r.objective, r.objectiveCiLow, r.objectiveCiHigh }, m_regimeBest[i])
                                    .improves();
                        won |= r.won;
                    }
        }
        if (!won) {
            m_store.setStatus(id, CandidateStatus::Rejected,
                "approved by the engineer but no longer faster than the best of any regime");
            return;
        }
        m_store.recordEvaluation(e);
        m_store.setStatus(id, CandidateStatus::Accepted, "approved by the engineer: " + reason);
        setBest(id, value, e.regimes);
        return;
    }
    if (!(e.objective > 0) || !compareWithBest(value, m_bestValue).improves()) {
        m_store.setStatus(id, CandidateStatus::Rejected,
            "approved by the engineer but no longer faster than the best"
                + (m_best ? " (" + *m_best + ")" : std::string()));
        return;
    }
    m_store.setStatus(id, CandidateStatus::Accepted, "approved by the engineer: " + reason);
    setBest(id, value);
}

std::vector<RegimeStanding> ResearchLoop::regimeStandings() const
{
    std::vector<RegimeStanding> out;
    for (std::size_t r = 0; r < m_regimes.size(); ++r)
        out.push_back({ m_regimes[r], m_regimeBest[r], m_regimeBestId[r] });
    return out;
}

void ResearchLoop::setBest(const CandidateId& id, const ObjectiveValue& v, const std::vector<RegimeResult>& regimes)
{
    nlohmann::json won = nlohmann::json::array();
    std::optional<CandidateId> previous;
    std::optional<CurrentBest> refereeBest = currentBestOf(session(), id);
    const auto recorded = session().evaluations.find(id);
    const std::string gpu
        = recorded != session().evaluations.end() ? gpuModelOf(recorded->second) : session().device.name;
    {
        std::lock_guard lock(m_mutex);
        previous = m_best;
        m_best = id;
        m_bestValue = v;
        m_bestByGpu[gpu] = v;
        if (refereeBest)
            m_refereeBestByGpu[gpu] = *refereeBest;
        m_refereeBest = std::move(refereeBest);
        for (const RegimeResult& r : regimes)
            for (std::size_t i = 0; i < m_regimes.size(); ++i)
                if (r.won && r.name == m_regimes[i].name) {
                    m_regimeBest[i] = ObjectiveValue { r.objective, r.objectiveCiLow, r.objectiveCiHigh };
                    m_regimeBestId[i] = id;
                    won.push_back(r.name);
                }
    }
    m_sinceImprovement = 0;
    Event e;
    e.kind = EventKind::BestChanged;
    e.candidateId = id;
    e.timeMs = nowMs();
    e.data = { { "objective", v.value }, { "ciLow", v.ciLow }, { "ciHigh", v.ciHigh },
        { "previous", previous.value_or("") } };
    if (!won.empty())
        e.data["regimes"] = won; // the regimes whose best it became
    m_store.append(e);
    if (session().tree.head() != id)
        m_store.moveHead(id, "new best: proposals branch from it");
    requestProfile(id);
}

void ResearchLoop::requestProfile(const CandidateId& id)
{
    if (!m_options.profiler || session().profiles.count(id) || !session().tree.contains(id))
        return;
    m_profileAwaited = id;
    std::lock_guard lock(m_mutex);
    m_profileWanted = session().tree.at(id);
    m_cv.notify_all();
}

void ResearchLoop::handleProfiled(const Message& m)
{
    if (m.profile) {
        Event e;
        e.kind = EventKind::CandidateProfiled;
        e.candidateId = m.id;
        e.timeMs = nowMs();
        e.data = toJson(*m.profile);
        m_store.append(e);
    } else {
        // Not worth stopping the search for: the agent goes on without the profile.
        m_store.note("profiling " + m.id + " failed: " + m.error, { { "candidate", m.id } });
    }
    if (m_profileAwaited == m.id)
        m_profileAwaited.reset();
}

void ResearchLoop::emitStep(EventKind kind, const CandidateId& id, nlohmann::json data)
{
    Event e;
    e.kind = kind;
    e.candidateId = id;
    e.timeMs = nowMs();
    e.data = std::move(data);
    m_store.append(e);
}

const Budget& ResearchLoop::budget() const
{
    return m_options.budgetOverride ? *m_options.budgetOverride : session().settings.budget;
}

int ResearchLoop::budgetLeft() const
{
    const int max = budget().maxEvaluations;
    if (max <= 0)
        return 1 << 30;
    std::size_t inFlight;
    {
        std::lock_guard lock(m_mutex);
        // A candidate on the device also has its Started message queued, and a profile is no evaluation: of the
        // messages, only the ends of evaluations not yet recorded count.
        inFlight = m_jobs.size() + m_onDevice.size();
        for (const Message& m : m_messages)
            inFlight += m.kind == Message::Kind::Finished || m.kind == Message::Kind::Failed ? 1 : 0;
    }
    return max - recordedCount(session()) - static_cast<int>(inFlight);
}

void ResearchLoop::recordDecided(Candidate c, Evaluation raw, bool measured)
{
    (void)measured;
    DecideInput in;
    in.evaluation = &raw;
    in.objective = session().settings.objective;
    {
        std::lock_guard lock(m_mutex);
        in.best = m_bestValue;
        in.bestId = m_best.value_or("");
        in.regimes = regimeStandings();
        // Another GPU model's best is no yardstick: compare with the best measured on this one (if any).
        if (!raw.measuredOn.gpu.empty() && m_best && session().evaluations.count(*m_best)
            && gpuModelOf(session().evaluations.at(*m_best)) != raw.measuredOn.gpu) {
            const auto it = m_bestByGpu.find(raw.measuredOn.gpu);
            in.best = it != m_bestByGpu.end() ? std::optional<ObjectiveValue>(it->second) : std::nullopt;
            in.bestId = it != m_bestByGpu.end() ? "the best on " + raw.measuredOn.gpu : std::string();
        }
    }
    const Decision d = screenDecision(raw, decide(in));
    Evaluation rec = applyDecision(raw, d);
    rec.candidateId = c.id;
    m_store.recordEvaluation(rec);
    const CandidateStatus want = statusForVerdict(d.verdict);
    if (session().tree.at(c.id).status != want)
        m_store.setStatus(c.id, want, d.reasons.empty() ? std::string() : d.reasons.back().message);
    ++m_result.recordedThisRun;
    if (d.verdict == Verdict::Accepted && d.objective)
        setBest(c.id, *d.objective, d.regimes);
    else if (!raw.fidelity.screen()) // a screen can never improve: it does not count towards convergence
        ++m_sinceImprovement;
    try {
        const Candidate observed = session().tree.at(c.id);
        m_agent.observe(observed, rec);
    } catch (const std::exception& ex) {
        m_store.note(std::string("agent failed to observe ") + c.id + ": " + ex.what());
    }
}

void ResearchLoop::enqueue(Candidate c)
{
    const Problem& problem = m_evaluator.problem();
    const MeasurementKey key = measurementKeyFor(c, problem, m_evaluator.device(), m_options.measurementProtocol);
    const std::string digest = key.digest();
    if (auto it = m_measured.find(digest); it != m_measured.end()) {
        ++m_result.reusedThisRun;
        const Evaluation raw = it->second;
        recordDecided(c, raw, false);
        return;
    }
    if (m_options.cache) {
        std::optional<Evaluation> hit;
        try {
            hit = m_options.cache->find(key);
        } catch (const std::exception& ex) {
            m_store.note(std::string("tuning database lookup failed: ") + ex.what());
        }
        if (hit) {
            ++m_result.reusedThisRun;
            m_measured[digest] = *hit;
            m_store.note("measurement of " + c.id + " reused from the tuning database", { { "candidate", c.id } });
            recordDecided(c, *hit, false);
            return;
        }
    }
    Evaluation early;
    early.candidateId = c.id;
    early.startedMs = early.finishedMs = nowMs();
    try {
        const KernelSpec spec = parseKernelSpec(c.source, problem);
        if (auto why = checkDeviceLimits(spec, c.params, shapesOf(problem), m_evaluator.device())) {
            early.verdict = Verdict::Rejected;
            early.reasons.push_back(*why);
            recordDecided(c, early, false);
            return;
        }
    } catch (const std::exception& ex) {
        early.verdict = Verdict::CompileFailed;
        early.reasons.push_back({ "spec.invalid", ex.what(), 0, true });
        early.compile.log = ex.what();
        recordDecided(c, early, false);
        return;
    }
    m_store.setStatus(c.id, CandidateStatus::Compiling);
    auto job = std::make_shared<Job>();
    job->candidate = c;
    std::lock_guard lock(m_mutex);
    m_jobs.push_back(job);
    m_compileQueue.push_back(job);
    m_cv.notify_all();
}

void ResearchLoop::askAgent(int count, int evaluationsLeft)
{
    const Session& s = session();
    AgentContext ctx;
    ctx.problem = &m_evaluator.problem();
    ctx.session = &s;
    ctx.maxProposals = count;
    if (budget().maxEvaluations > 0)
        ctx.evaluationsLeft = std::max(0, evaluationsLeft);
    ctx.branchFrom = s.tree.head();
    if (ctx.branchFrom.empty() && m_best)
        ctx.branchFrom = *m_best;
    const Hypothesis* latest = nullptr;
    for (const auto& [id, h] : s.hypotheses)
        if (!latest || h.createdMs >= latest->createdMs)
            latest = &h;
    if (latest)
        ctx.hypothesis = *latest;
    if (m_best)
        if (const auto p = s.profiles.find(*m_best); p != s.profiles.end())
            ctx.bottleneckSummary = bottleneckSummary(p->second);

    CancelToken cancel;
    {
        std::lock_guard lock(m_mutex);
        cancel = m_agentCancel;
    }
    std::vector<Proposal> proposals = m_agent.propose(ctx, cancel);
    bool inFlight;
    {
        std::lock_guard lock(m_mutex);
        inFlight = !m_jobs.empty() || !m_onDevice.empty() || !m_messages.empty();
    }
    if (!inFlight) {
        // An agent that waits for the engineer's review of its own proposal is not exhausted.
        const Session& st = session();
        for (const CandidateId& id : st.tree.order())
            if (st.tree.at(id).status == CandidateStatus::PendingReview && !isRecorded(st, id)) {
                inFlight = true;
                break;
            }
    }
    if (proposals.empty()) {
        (inFlight ? m_agentWaiting : m_agentExhausted) = true;
        return;
    }
    if (static_cast<int>(proposals.size()) > count)
        proposals.resize(static_cast<std::size_t>(count));
    for (Proposal& p : proposals) {
        Candidate c = std::move(p.candidate);
        c.id.clear();
        if (!c.parentId.empty() && !s.tree.contains(c.parentId))
            c.parentId = ctx.branchFrom;
        if (c.agent.empty())
            c.agent = m_agent.name();
        c.status = CandidateStatus::Proposed;
        c.statusReason = p.note;
        c.createdMs = nowMs();
        const Event ev = m_store.proposeCandidate(std::move(c));
        const CandidateId id = ev.candidateId;
        if (p.needsReview && !s.settings.autoApproveLlm) {
            m_store.setStatus(id, CandidateStatus::PendingReview, "waits for the engineer's approval");
            continue;
        }
        enqueue(s.tree.at(id));
    }
}

void ResearchLoop::handle(Message& m)
{
    switch (m.kind) {
    case Message::Kind::Started:
        emitStep(EventKind::CandidateCompiled, m.id, { { "report", compileSummary(m.evaluation.compile) } });
        m_store.setStatus(m.id, CandidateStatus::Verifying);
        return;
    case Message::Kind::Failed:
        m_store.note("evaluator failed on " + m.id + ": " + m.error, { { "candidate", m.id } });
        {
            std::lock_guard lock(m_mutex);
            if (!m_stopRequested) {
                m_stopRequested = true;
                m_stopReason = "evaluator failed: " + m.error;
            }
        }
        m_result.state = "failed";
        return;
    case Message::Kind::Profiled:
        handleProfiled(m);
        return;
    case Message::Kind::Finished:
        break;
    }
    // However this decision ends, the device may then take the next job with the best it leaves.
    struct Decided {
        ResearchLoop* loop;
        bool measured;
        ~Decided()
        {
            if (!measured)
                return;
            std::lock_guard lock(loop->m_mutex);
            --loop->m_undecided;
            loop->m_cv.notify_all();
        }
    } decided { this, m.measured };
    m_agentWaiting = false;
    if (m.measured) {
        ++m_result.evaluatedThisRun;
        nlohmann::json shapes = nlohmann::json::array();
        nlohmann::json timed = nlohmann::json::array();
        for (const ShapeResult& r : m.evaluation.shapes) {
            shapes.push_back({ { "shape", r.shape.label() }, { "heldOut", r.heldOut }, { "correct", r.correct } });
            if (r.timing)
                timed.push_back(
                    { { "shape", r.shape.label() }, { "medianUs", r.timing->medianUs }, { "speedup", r.speedup },
                        { "speedupCiLow", r.speedupCiLow }, { "speedupCiHigh", r.speedupCiHigh } });
        }
        emitStep(EventKind::CandidateVerified, m.id,
            { { "correct", m.evaluation.correctEverywhere() }, { "shapes", shapes } });
        emitStep(EventKind::CandidateTimed, m.id, { { "shapes", timed } });
    } else {
        emitStep(EventKind::CandidateCompiled, m.id, { { "report", compileSummary(m.evaluation.compile) } });
    }
    // Keyed by the GPU that measured it, so a mixed pool never files one model's times under another's.
    if (const auto measuredBy = m_evaluator.deviceFor(m.evaluation.measuredOn)) {
        const MeasurementKey key
            = measurementKeyFor(m.candidate, m_evaluator.problem(), *measuredBy, m_options.measurementProtocol);
        m_measured[key.digest()] = m.evaluation;
        if (m_options.cache) {
            try {
                m_options.cache->record(key, m.evaluation);
            } catch (const std::exception& ex) {
                m_store.note(std::string("tuning database write failed: ") + ex.what());
            }
        }
    }
    recordDecided(m.candidate, m.evaluation, m.measured);
}

std::optional<std::string> ResearchLoop::stopCondition()
{
    const Session& s = session();
    {
        std::lock_guard lock(m_mutex);
        if (m_stopRequested)
            return m_stopReason;
    }
    const Budget& b = budget();
    if (b.maxEvaluations > 0 && recordedCount(s) >= b.maxEvaluations)
        return "budget: " + std::to_string(b.maxEvaluations) + " evaluations";
    if (b.maxMinutes > 0) {
        std::int64_t paused;
        {
            std::lock_guard lock(m_mutex);
            paused = m_pausedMs + (m_paused ? nowMs() - m_pauseStartedMs : 0);
        }
        if (static_cast<double>(nowMs() - m_startMs - paused) >= b.maxMinutes * 60000.0)
            return "budget: " + fmtMinutes(b.maxMinutes) + " minutes";
    }
    if (b.convergenceWindow > 0 && m_sinceImprovement >= b.convergenceWindow)
        return "converged: no accepted improvement in " + std::to_string(b.convergenceWindow) + " evaluations";
    if (m_agentExhausted) {
        std::lock_guard lock(m_mutex);
        if (m_jobs.empty() && m_onDevice.empty() && m_messages.empty()) {
            for (const CandidateId& id : s.tree.order())
                if (s.tree.at(id).status == CandidateStatus::PendingReview && !isRecorded(s, id))
                    return std::nullopt; // waits for the engineer
            return "the agent has nothing left to propose";
        }
    }
    return std::nullopt;
}

LoopResult ResearchLoop::run()
{
    {
        std::lock_guard lock(m_mutex);
        if (m_running)
            throw std::logic_error("ResearchLoop::run called twice");
        m_running = true;
        m_shutdown = false;
        m_dropInFlight = false;
        m_deviceCancel = CancelToken();
        if (!m_stopRequested)
            m_agentCancel = CancelToken();
    }
    m_result = LoopResult {};
    m_agentExhausted = m_agentWaiting = false;
    m_startMs = nowMs();
    restoreFromStore();
    m_profileAwaited.reset();
    if (m_best)
        requestProfile(*m_best); // a resumed session whose best was never profiled
    m_store.setState("running", "agent " + m_agent.name());

    std::vector<std::thread> workers;
    for (int i = 0; i < m_options.compileThreads; ++i)
        workers.emplace_back([this] { compileWorker(); });
    for (int i = 0; i < m_options.deviceThreads; ++i)
        workers.emplace_back([this] { deviceWorker(); });

    std::string reason;
    try {
        // Unfinished candidates of an interrupted run go first; nothing recorded is measured again.
        const Session& s = session();
        std::vector<CandidateId> unfinished;
        for (const CandidateId& id : s.tree.order())
            if (awaitsEvaluation(s.tree.at(id).status))
                unfinished.push_back(id);
        if (!unfinished.empty())
            m_store.note(s.evaluations.empty()
                    ? "evaluating the " + std::to_string(unfinished.size()) + " candidates the session starts with"
                    : "resuming: " + std::to_string(unfinished.size()) + " unfinished candidates evaluated first");
        for (const CandidateId& id : unfinished)
            if (budgetLeft() > 0)
                enqueue(s.tree.at(id));

        for (;;) {
            std::deque<std::function<void()>> commands;
            std::deque<Message> messages;
            {
                std::lock_guard lock(m_mutex);
                commands.swap(m_commands);
                messages.swap(m_messages);
            }
            for (auto& cmd : commands) {
                try {
                    cmd();
                } catch (const std::exception& ex) {
                    m_store.note(ex.what());
                }
            }
            for (Message& m : messages)
                handle(m);
            if (auto why = stopCondition()) {
                reason = *why;
                break;
            }
            bool paused;
            std::size_t ahead;
            {
                std::lock_guard lock(m_mutex);
                paused = m_paused;
                ahead = m_jobs.size();
            }
            const int left = budgetLeft();
            const int room = std::min(m_options.pipelineDepth - static_cast<int>(ahead), left);
            if (!paused && room > 0 && !m_agentExhausted && !m_agentWaiting && !m_profileAwaited) {
                try {
                    askAgent(room, left);
                } catch (const std::exception& ex) {
                    std::optional<std::string> stop;
                    {
                        std::lock_guard lock(m_mutex);
                        if (m_stopRequested)
                            stop = m_stopReason;
                    }
                    if (stop) {
                        // The stop cancelled the agent's request: a stop, not an agent failure.
                        m_store.note("stopped while the agent was working: " + *stop + " (" + ex.what() + ")");
                        reason = *stop;
                        break;
                    }
                    m_store.note(std::string("agent failed: ") + ex.what());
                    reason = std::string("agent failed: ") + ex.what();
                    m_result.state = "failed";
                    break;
                }
                continue;
            }
            std::unique_lock lock(m_mutex);
            m_cv.wait_for(lock, std::chrono::milliseconds(100),
                [this] { return !m_messages.empty() || !m_commands.empty() || m_stopRequested; });
        }
    } catch (const std::exception& ex) {
        reason = std::string("loop failed: ") + ex.what();
        m_result.state = "failed";
    }

    // Drain: nothing new starts; what is on the device finishes and is recorded.
    {
        std::lock_guard lock(m_mutex);
        m_stopRequested = true;
        if (m_stopReason.empty())
            m_stopReason = reason;
        m_cv.notify_all();
    }
    for (;;) {
        std::deque<Message> messages;
        bool busy;
        {
            std::unique_lock lock(m_mutex);
            m_cv.wait_for(
                lock, std::chrono::milliseconds(50), [this] { return !m_messages.empty() || m_onDevice.empty(); });
            messages.swap(m_messages);
            busy = !m_onDevice.empty();
        }
        for (Message& m : messages) {
            try {
                handle(m);
            } catch (const std::exception& ex) {
                if (m_result.state.empty()) {
                    m_result.state = "failed";
                    reason = std::string("loop failed: ") + ex.what();
                }
            }
        }
        if (!busy && messages.empty())
            break;
    }
    std::list<std::shared_ptr<Job>> leftover;
    {
        std::lock_guard lock(m_mutex);
        m_shutdown = true;
        m_cv.notify_all();
    }
    for (std::thread& t : workers)
        t.join();
    {
        std::lock_guard lock(m_mutex);
        leftover.swap(m_jobs);
        m_compileQueue.clear();
        std::deque<std::function<void()>> commands;
        commands.swap(m_commands);
        m_running = false;
        m_stopRequested = false;
        m_stopReason.clear();
        m_agentCancel = CancelToken();
        // Commands that arrived during the drain still run, on this thread.
        m_commands.clear();
        for (auto& cmd : commands)
            m_commands.push_back(std::move(cmd));
    }
    try {
        for (auto& cmd : m_commands)
            cmd();
        m_commands.clear();
        for (const auto& job : leftover)
            m_store.setStatus(job->candidate.id, CandidateStatus::Proposed, "not evaluated: the loop stopped");
        if (m_result.state.empty()) {
            const bool byUser = reason.rfind("budget", 0) != 0 && reason.rfind("converged", 0) != 0
                && reason != "the agent has nothing left to propose";
            m_result.state = byUser ? "stopped" : "finished";
        }
        m_store.setState(m_result.state, reason);
    } catch (const std::exception& ex) {
        m_result.state = "failed";
        reason += std::string("; ") + ex.what();
    }
    m_result.reason = reason;
    {
        std::lock_guard lock(m_mutex);
        m_result.best = m_best;
        m_result.bestObjective = m_bestValue ? m_bestValue->value : 0;
    }
    return m_result;
}

void ResearchLoop::compileWorker()
{
    const Problem& problem = m_evaluator.problem();
    const std::vector<Shape> shapes = shapesOf(problem);
    for (;;) {
        std::shared_ptr<Job> job;
        {
            std::unique_lock lock(m_mutex);
            m_cv.wait(lock, [this] { return m_shutdown || !m_compileQueue.empty(); });
            if (m_shutdown)
                return;
            job = m_compileQueue.front();
            m_compileQueue.pop_front();
            job->compileStarted = true;
        }
        CompileReport report;
        std::optional<VerdictReason> pruned;
        try {
            report = m_evaluator.compile(job->candidate);
            if (report.ok)
                pruned = checkDeviceLimits(parseKernelSpec(job->candidate.source), job->candidate.params, shapes,
                    m_evaluator.device(), &report);
        } catch (const std::exception& ex) {
            report.ok = false;
            report.log = std::string("compile threw: ") + ex.what();
        }
        std::lock_guard lock(m_mutex);
        job->report = std::move(report);
        job->pruned = std::move(pruned);
        job->compiled = true;
        m_cv.notify_all();
    }
}

void ResearchLoop::runProfile(const Candidate& subject, const CancelToken& cancel)
{
    Message m;
    m.kind = Message::Kind::Profiled;
    m.id = subject.id;
    try {
        m.profile = m_options.profiler->profile(subject, cancel);
        m.profile->candidateId = subject.id;
    } catch (const std::exception& ex) {
        m.error = ex.what();
    }
    std::lock_guard lock(m_mutex);
    m_messages.push_back(std::move(m));
    m_cv.notify_all();
}

void ResearchLoop::deviceWorker()
{
    for (;;) {
        std::shared_ptr<Job> job;
        CancelToken cancel;
        {
            std::unique_lock lock(m_mutex);
            auto ready = m_jobs.end();
            m_cv.wait(lock, [&] {
                if (m_shutdown)
                    return true;
                if (m_paused || m_stopRequested)
                    return false;
                if (m_profileWanted)
                    return true;
                // In proposal order: a child is never measured before the parent it is compared with, and
                // the compile pool, running ahead, normally has the first job ready.
                ready = m_jobs.begin();
                return ready != m_jobs.end() && (*ready)->compiled && m_undecided == 0;
            });
            if (m_shutdown)
                return;
            if (m_profileWanted) {
                Candidate subject = std::move(*m_profileWanted);
                m_profileWanted.reset();
                cancel = m_deviceCancel;
                lock.unlock();
                runProfile(subject, cancel);
                continue;
            }
            job = *ready;
            m_jobs.erase(ready);
            Message m;
            m.id = job->candidate.id;
            m.candidate = job->candidate;
            if (!job->report.ok || job->pruned) {
                m.kind = Message::Kind::Finished;
                m.evaluation.candidateId = m.id;
                m.evaluation.compile = job->report;
                m.evaluation.startedMs = m.evaluation.finishedMs = nowMs();
                if (!job->report.ok) {
                    m.evaluation.verdict = Verdict::CompileFailed;
                    m.evaluation.reasons.push_back({ "compile.error", firstLines(job->report.log, 600), 0, true });
                } else {
                    m.evaluation.verdict = Verdict::Rejected;
                    m.evaluation.reasons.push_back(*job->pruned);
                }
                m_messages.push_back(std::move(m));
                m_cv.notify_all();
                continue;
            }
            m_onDevice.insert(m.id);
            m.kind = Message::Kind::Started;
            m.evaluation.compile = job->report;
            m_messages.push_back(std::move(m));
            cancel = m_deviceCancel;
            m_cv.notify_all();
        }
        Message done;
        done.id = job->candidate.id;
        done.candidate = job->candidate;
        try {
            EvaluateOptions options = m_options.evaluate;
            options.fidelity = job->candidate.fidelity;
            {
                std::lock_guard lock(m_mutex);
                options.best = m_refereeBest;
                options.bestByGpu = m_refereeBestByGpu;
            }
            done.evaluation = m_evaluator.evaluate(job->candidate, options, cancel);
            done.evaluation.candidateId = done.id;
            if (done.evaluation.compile.kernels.empty() && !job->report.kernels.empty())
                done.evaluation.compile = job->report;
            done.kind = Message::Kind::Finished;
            done.measured = true;
        } catch (const std::exception& ex) {
            done.kind = Message::Kind::Failed;
            done.error = ex.what();
        }
        std::lock_guard lock(m_mutex);
        m_onDevice.erase(done.id);
        if (!(m_dropInFlight && done.kind == Message::Kind::Finished)) {
            m_undecided += done.measured ? 1 : 0;
            m_messages.push_back(std::move(done));
        }
        m_cv.notify_all();
    }
}

} // namespace kl
