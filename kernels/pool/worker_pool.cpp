#include "kernels/pool/worker_pool.h"

#include "core/errors.h"
#include "kernels/gpu_profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
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
        o.compileOnWorker = spec.compileOnWorker;
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
                markUnavailable(s, error);
                return;
            }
            s.status.state = "idle";
            s.ranBefore = true;
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
    bool anyCompilesOnWorker = false;
    {
        std::lock_guard lock(m_mutex);
        std::set<std::string> archs;
        for (const auto& s : m_slots) {
            if (!s->usable || s->status.arch.empty())
                continue;
            if (s->spec.compileOnWorker)
                anyCompilesOnWorker = true; // its host compiles when it evaluates
            else if (archs.insert(s->status.arch).second)
                perArch.push_back(s->evaluator.get());
        }
    }
    if (perArch.empty() && anyCompilesOnWorker) {
        CompileReport onWorkers;
        onWorkers.ok = true;
        onWorkers.log = "compiled on each worker's host when it evaluates (workers.json \"compile\": \"worker\")";
        return onWorkers;
    }
    if (perArch.empty())
        throw std::runtime_error(noWorkerLeft());
    CompileReport first = perArch.front()->compile(c);
    for (std::size_t i = 1; i < perArch.size(); ++i)
        (void)perArch[i]->compile(c); // the other architectures' CUBINs, so evaluate() finds them cached
    return first;
}

std::optional<DeviceInfo> WorkerPool::deviceFor(const MeasuredOn& m) const
{
    if (m.gpu.empty()) // measured nowhere (a compile failure) or recorded before pools: the session's device
        return device();
    std::lock_guard lock(m_mutex);
    const Slot* sameModel = nullptr;
    for (const auto& s : m_slots) {
        if (s->status.gpu.empty() || s->status.gpu != m.gpu)
            continue; // never started, or another model
        if (s->spec.id == m.worker)
            return s->evaluator->device(); // known since it started: no request
        if (!sameModel)
            sameModel = s.get();
    }
    if (sameModel)
        return sameModel->evaluator->device();
    return std::nullopt;
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
        const auto now = std::chrono::steady_clock::now();
        for (std::size_t i = 0; i < m_slots.size(); ++i) {
            const Slot& s = *m_slots[i];
            if (!s.usable || avoid.count(static_cast<int>(i)))
                continue;
            anyCandidate = true; // a lost one is waited for: it is reconnected after its backoff
            if (!s.busy && s.retryAt <= now) {
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
        s.status.state = s.retryAt > std::chrono::steady_clock::now() ? "lost" : "idle";
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

void WorkerPool::markUnavailable(Slot& s, const std::string& why)
{
    s.usable = false;
    s.status.state = "unavailable";
    s.status.lastError = why;
}

int WorkerPool::waiting() const
{
    std::lock_guard lock(m_mutex);
    return m_waiting;
}

void WorkerPool::setReconnectPolicy(double firstBackoffSeconds, double maxBackoffSeconds, int reconnectAttempts)
{
    std::lock_guard lock(m_mutex);
    m_firstBackoffSeconds = std::max(0.0, firstBackoffSeconds);
    m_maxBackoffSeconds = std::max(m_firstBackoffSeconds, maxBackoffSeconds);
    m_reconnectAttempts = std::max(1, reconnectAttempts);
}

void WorkerPool::backOff(Slot& s, const std::string& why)
{
    const double wait = std::min(m_maxBackoffSeconds, m_firstBackoffSeconds * std::pow(2.0, s.failedStarts));
    s.retryAt = std::chrono::steady_clock::now()
        + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(wait));
    s.status.state = "lost";
    s.status.lastError = why;
}

PoolWorkerStatus WorkerPool::statusOf(const Slot& s) const
{
    PoolWorkerStatus w = s.status;
    if (w.state == "lost") {
        const auto left = std::chrono::duration<double>(s.retryAt - std::chrono::steady_clock::now()).count();
        w.reconnectInSeconds = left > 0 ? std::ceil(left) : 0; // whole seconds: snapshots change only when shown
    }
    return w;
}

std::vector<PoolWorkerStatus> WorkerPool::status() const
{
    return snapshot().workers;
}

PoolSnapshot WorkerPool::snapshot() const
{
    std::lock_guard lock(m_mutex);
    PoolSnapshot pool;
    for (const auto& s : m_slots)
        pool.workers.push_back(statusOf(*s));
    pool.waiting = m_waiting;
    return pool;
}

Evaluation WorkerPool::runOn(int i, const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel)
{
    std::string gpu;
    {
        std::lock_guard lock(m_mutex);
        m_slots[static_cast<std::size_t>(i)]->status.candidate = c.id;
        gpu = m_slots[static_cast<std::size_t>(i)]->status.gpu;
    }
    GpuEvaluator& ev = *m_slots[static_cast<std::size_t>(i)]->evaluator;
    Evaluation e;
    if (opt.bestByGpu.empty()) {
        e = ev.evaluate(c, opt, cancel);
    } else {
        EvaluateOptions onThisGpu = opt; // another model's best is no yardstick for a jump
        const auto best = opt.bestByGpu.find(gpu);
        onThisGpu.best = best != opt.bestByGpu.end() ? std::optional<CurrentBest>(best->second) : std::nullopt;
        e = ev.evaluate(c, onThisGpu, cancel);
    }
    const auto outcome = ev.lastWorkerOutcome();
    if (outcome == GpuEvaluator::WorkerOutcome::Unavailable) {
        const std::string why = firstMessage(e, "harness.worker-unavailable");
        {
            std::lock_guard lock(m_mutex);
            Slot& s = *m_slots[static_cast<std::size_t>(i)];
            // A worker that ran before gets its reconnects; one that never ran is passed over.
            if (!s.ranBefore)
                markUnavailable(s, why);
            else if (++s.failedStarts < m_reconnectAttempts)
                backOff(s, "reconnect " + std::to_string(s.failedStarts) + " failed: " + why);
            else
                markUnavailable(s, "gave up after " + std::to_string(s.failedStarts) + " failed reconnects: " + why);
        }
        release(i, nullptr);
        return e;
    }
    {
        std::lock_guard lock(m_mutex);
        Slot& s = *m_slots[static_cast<std::size_t>(i)];
        s.failedStarts = 0;
        s.ranBefore = true;
        if (outcome == GpuEvaluator::WorkerOutcome::Lost) {
            ++s.status.lost;
            std::string why;
            for (const auto& r : e.reasons)
                if (r.rule == "worker.lost" || r.rule == "worker.crashed")
                    why = r.message;
            backOff(s, why);
        }
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
            // Not an attempt: try the next worker, or this one again once its backoff is over.
            std::lock_guard lock(m_mutex);
            if (!m_slots[static_cast<std::size_t>(i)]->usable)
                avoid.insert(i);
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

void PoolStatusWriter::update()
{
    PoolSnapshot now = m_pool.snapshot();
    if (m_last && *m_last == now)
        return;
    if (m_onLoss)
        for (std::size_t i = 0; i < now.workers.size(); ++i) {
            const PoolWorkerStatus& w = now.workers[i];
            const bool said = m_last && i < m_last->workers.size() && m_last->workers[i].lost == w.lost
                && m_last->workers[i].state == w.state;
            if (said || (w.state != "lost" && w.state != "unavailable"))
                continue;
            m_onLoss("worker " + w.id
                + (w.state == "lost" ? " was lost (reconnecting after a backoff): " : " given up: ") + w.lastError);
        }
    try {
        writePoolStatus(m_dir, now);
    } catch (const std::exception& e) {
        if (!m_warned)
            std::cerr << "kloop run: cannot write the workers' status for the workbench: " << e.what() << "\n";
        m_warned = true;
    }
    m_last = std::move(now);
}

CandidateProfile PoolProfiler::profile(const Candidate& c, const CancelToken& cancel)
{
    return m_pool.withFreeWorker(cancel, [&](GpuEvaluator& ev) { return GpuProfiler(ev).profile(c, cancel); });
}

} // namespace kl
