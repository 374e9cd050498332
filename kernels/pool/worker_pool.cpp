#include "kernels/pool/worker_pool.h"

#include "core/errors.h"
#include "kernels/gpu_profiler.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

namespace kl {

namespace {

    const char* transportName(WorkerSpec::Kind k)
    {
        switch (k) {
        case WorkerSpec::Kind::Local:
            return "local";
        case WorkerSpec::Kind::Ssh:
            return "ssh";
        case WorkerSpec::Kind::Slurm:
            return "slurm";
        }
        return "local";
    }

    bool hasRule(const Evaluation& e, const std::string& rule)
    {
        return std::any_of(e.reasons.begin(), e.reasons.end(), [&](const VerdictReason& r) { return r.rule == rule; });
    }

    std::string firstMessage(const Evaluation& e, const std::string& rule)
    {
        for (const auto& r : e.reasons)
            if (r.rule == rule)
                return r.message;
        return {};
    }

} // namespace

WorkerPool::WorkerPool(Problem problem, std::vector<WorkerSpec> specs, GpuEvaluatorOptions options)
    : m_problem(std::move(problem))
{
    if (specs.empty())
        throw InputError("a worker pool needs at least one worker");
    if (!options.compiler)
        options.compiler = std::make_shared<NvrtcCompiler>(options.compileCacheDir, options.compileThreads);
    const std::string localWorker = options.worker.command.empty() ? defaultWorkerPath() : options.worker.command[0];
    bool anySsh = false;
    for (WorkerSpec& spec : specs) {
        auto slot = std::make_unique<Slot>();
        GpuEvaluatorOptions o = options;
        o.worker.command = workerCommand(spec, localWorker);
        o.worker.environment = options.worker.environment;
        for (auto& kv : workerEnvironment(spec))
            o.worker.environment.push_back(kv);
        o.worker.name = spec.id;
        o.worker.remote = spec.remote();
        o.worker.heartbeatSeconds = spec.heartbeatSeconds;
        o.worker.installHint = workerInstallHint(spec);
        anySsh = anySsh || (spec.controlMaster && (spec.kind == WorkerSpec::Kind::Ssh || !spec.login.empty()));
        slot->evaluator = std::make_unique<GpuEvaluator>(m_problem, o);
        slot->status.id = spec.id;
        slot->status.transport = transportName(spec.kind);
        slot->status.state = "starting";
        slot->spec = std::move(spec);
        m_slots.push_back(std::move(slot));
    }
    if (anySsh) {
        std::error_code ec;
        std::filesystem::create_directories(sshControlDir(), ec); // without it ssh only warns and connects alone
        std::filesystem::permissions(sshControlDir(), std::filesystem::perms::owner_all, ec);
    }
}

WorkerPool::~WorkerPool() = default;

int WorkerPool::start()
{
    std::vector<std::thread> starters;
    for (std::size_t i = 0; i < m_slots.size(); ++i)
        starters.emplace_back([this, i] {
            Slot& s = *m_slots[i];
            std::string error;
            DeviceInfo d;
            try {
                d = s.evaluator->device();
                if (d.empty())
                    error = "the worker reported no device";
            } catch (const std::exception& e) {
                error = e.what();
            }
            std::lock_guard lock(m_mutex);
            const auto& hello = s.evaluator->client().hello();
            s.status.starts = s.evaluator->client().starts();
            if (!error.empty()) {
                s.usable = false;
                s.status.state = "unavailable";
                s.status.lastError = error;
                return;
            }
            s.status.state = "idle";
            s.status.gpu = d.name;
            s.status.uuid = d.uuid;
            s.status.arch = d.arch;
            s.status.host = hello.host;
            s.status.pid = hello.pid;
        });
    for (auto& t : starters)
        t.join();
    std::lock_guard lock(m_mutex);
    m_cv.notify_all();
    return static_cast<int>(std::count_if(m_slots.begin(), m_slots.end(), [](const auto& s) { return s->usable; }));
}

const DeviceInfo& WorkerPool::device() const
{
    std::lock_guard lock(m_mutex);
    if (m_device.empty())
        for (const auto& s : m_slots)
            if (s->usable && s->status.state != "starting") {
                m_device = s->evaluator->device();
                break;
            }
    if (m_device.empty())
        throw std::runtime_error(noWorkerLeft());
    return m_device;
}

CompileReport WorkerPool::compile(const Candidate& c)
{
    std::vector<GpuEvaluator*> perArch;
    {
        std::lock_guard lock(m_mutex);
        std::set<std::string> archs;
        for (const auto& s : m_slots)
            if (s->usable && !s->status.arch.empty() && archs.insert(s->status.arch).second)
                perArch.push_back(s->evaluator.get());
    }
    if (perArch.empty())
        throw std::runtime_error(noWorkerLeft());
    CompileReport first = perArch.front()->compile(c);
    for (std::size_t i = 1; i < perArch.size(); ++i)
        (void)perArch[i]->compile(c); // the other architectures' CUBINs, so evaluate() finds them cached
    return first;
}

std::string WorkerPool::noWorkerLeft() const
{
    std::string why = "no worker of the pool is usable";
    for (const auto& s : m_slots)
        if (!s->usable)
            why += "; " + s->status.id + ": " + s->status.lastError;
    return why;
}

int WorkerPool::acquire(const std::set<int>& avoid, const CancelToken& cancel)
{
    std::unique_lock lock(m_mutex);
    ++m_waiting;
    int chosen = -1;
    for (;;) {
        bool anyCandidate = false;
        for (std::size_t i = 0; i < m_slots.size(); ++i) {
            const Slot& s = *m_slots[i];
            if (!s.usable || avoid.count(static_cast<int>(i)))
                continue;
            anyCandidate = true;
            if (!s.busy) {
                chosen = static_cast<int>(i);
                break;
            }
        }
        if (chosen >= 0 || !anyCandidate || cancel.cancelled())
            break;
        m_cv.wait_for(lock, std::chrono::milliseconds(200));
    }
    --m_waiting;
    if (chosen >= 0) {
        m_slots[static_cast<std::size_t>(chosen)]->busy = true;
        m_slots[static_cast<std::size_t>(chosen)]->status.state = "busy";
    }
    return chosen;
}

void WorkerPool::release(int i, const Evaluation* measured)
{
    std::lock_guard lock(m_mutex);
    Slot& s = *m_slots[static_cast<std::size_t>(i)];
    s.busy = false;
    s.status.candidate.clear();
    if (s.usable)
        s.status.state = "idle";
    s.status.starts = s.evaluator->client().starts();
    if (const auto& hello = s.evaluator->client().hello(); hello.pid)
        s.status.pid = hello.pid;
    if (measured) {
        ++s.status.evaluations;
        if (measured->deviceAfter.available) {
            s.status.smClockMHz = measured->deviceAfter.smClockMHz;
            s.status.memClockMHz = measured->deviceAfter.memClockMHz;
        }
    }
    m_cv.notify_all();
}

void WorkerPool::markUnavailable(int i, const std::string& why)
{
    std::lock_guard lock(m_mutex);
    Slot& s = *m_slots[static_cast<std::size_t>(i)];
    s.usable = false;
    s.status.state = "unavailable";
    s.status.lastError = why;
}

int WorkerPool::waiting() const
{
    std::lock_guard lock(m_mutex);
    return m_waiting;
}

std::vector<PoolWorkerStatus> WorkerPool::status() const
{
    std::lock_guard lock(m_mutex);
    std::vector<PoolWorkerStatus> out;
    for (const auto& s : m_slots)
        out.push_back(s->status);
    return out;
}

Evaluation WorkerPool::runOn(int i, const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel)
{
    {
        std::lock_guard lock(m_mutex);
        m_slots[static_cast<std::size_t>(i)]->status.candidate = c.id;
    }
    GpuEvaluator& ev = *m_slots[static_cast<std::size_t>(i)]->evaluator;
    Evaluation e = ev.evaluate(c, opt, cancel);
    const auto outcome = ev.lastWorkerOutcome();
    if (outcome == GpuEvaluator::WorkerOutcome::Unavailable) {
        markUnavailable(i, firstMessage(e, "harness.worker-unavailable"));
        release(i, nullptr);
        return e;
    }
    if (outcome == GpuEvaluator::WorkerOutcome::Lost) {
        std::lock_guard lock(m_mutex);
        Slot& s = *m_slots[static_cast<std::size_t>(i)];
        ++s.status.lost;
        for (const auto& r : e.reasons)
            if (r.rule == "worker.lost" || r.rule == "worker.crashed")
                s.status.lastError = r.message;
    }
    release(i, &e);
    return e;
}

Evaluation WorkerPool::evaluate(const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel)
{
    std::set<int> avoid;
    std::string lostOn;
    std::string lostWhy;
    Evaluation firstAttempt;
    for (;;) {
        const int i = acquire(avoid, cancel);
        if (i < 0) {
            if (!lostOn.empty())
                break; // nowhere else to retry: the first attempt's result is recorded below
            if (cancel.cancelled()) {
                Evaluation e;
                e.candidateId = c.id;
                e.verdict = Verdict::Rejected;
                return e;
            }
            throw std::runtime_error(noWorkerLeft());
        }
        Evaluation e = runOn(i, c, opt, cancel);
        const auto outcome = m_slots[static_cast<std::size_t>(i)]->evaluator->lastWorkerOutcome();
        if (outcome == GpuEvaluator::WorkerOutcome::Unavailable) {
            avoid.insert(i); // never started: not an attempt, try the next worker
            continue;
        }
        if (!lostOn.empty()) {
            e.reasons.push_back({ "worker.retried",
                "worker " + lostOn + " was lost during this evaluation (" + lostWhy + "); measured again on "
                    + m_slots[static_cast<std::size_t>(i)]->spec.id,
                0, false });
            return e;
        }
        if (outcome != GpuEvaluator::WorkerOutcome::Lost || m_slots.size() < 2)
            return e;
        lostOn = m_slots[static_cast<std::size_t>(i)]->spec.id;
        lostWhy = hasRule(e, "worker.lost") ? firstMessage(e, "worker.lost") : firstMessage(e, "worker.crashed");
        avoid.insert(i);
        firstAttempt = std::move(e);
    }
    return firstAttempt;
}

CandidateProfile PoolProfiler::profile(const Candidate& c, const CancelToken& cancel)
{
    return m_pool.withFreeWorker(cancel, [&](GpuEvaluator& ev) { return GpuProfiler(ev).profile(c, cancel); });
}

} // namespace kl
