#pragma once
// A GPU pool: one GpuEvaluator (and worker) per WorkerSpec, behind the one Evaluator the research loop knows. The
// loop runs one device thread per worker (LoopOptions::deviceThreads); each evaluate() takes a free worker, so the
// candidate and its interleaved baseline are always timed by one GPU. A worker that is lost mid-evaluation (a
// dropped connection, a killed process) has that evaluation retried once on another worker; the result says so
// (`worker.retried`) and records which GPU measured it (Evaluation::measuredOn). A lost worker is "lost" for a
// backoff (1 s, doubling to 60 s), then started again by the next evaluation that takes it; after
// reconnectAttempts failed starts in a row it is "unavailable" for good, with the error. A worker that cannot start
// at all is passed over; with none left, evaluate() throws and the loop stops without recording anything false.
// Compilation stays on the client (one NVRTC pool shared by every worker, one CUBIN per distinct architecture),
// except for a worker whose spec says "compile": "worker": its host compiles what it evaluates.
#include "core/profile_summary.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/pool/worker_spec.h"
#include "kernels/pool/worker_status.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kl {

class WorkerPool final : public Evaluator {
public:
    WorkerPool(Problem problem, std::vector<WorkerSpec> specs, GpuEvaluatorOptions options = {});
    ~WorkerPool() override;

    // Starts every worker at once; returns how many started (the others are "unavailable", with their error).
    int start();

    const DeviceInfo& device() const override; // the first usable worker's: the session's header
    const Problem& problem() const override { return m_problem; }
    CompileReport compile(const Candidate& c) override; // for every distinct architecture in the pool
    // The referee judges a result against the best of the GPU model that measures it (EvaluateOptions::bestByGpu).
    Evaluation evaluate(const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel) override;
    std::optional<DeviceInfo> deviceFor(const MeasuredOn& m) const override; // that worker's, else one of its model

    // How a lost worker is reconnected: the first wait, the longest, and the failed starts in a row before giving up.
    void setReconnectPolicy(double firstBackoffSeconds, double maxBackoffSeconds, int reconnectAttempts);

    std::size_t size() const { return m_slots.size(); }
    std::vector<PoolWorkerStatus> status() const;
    int waiting() const; // evaluations waiting for a free worker
    PoolSnapshot snapshot() const; // status() and waiting() at one moment: a copy, safe on any thread
    GpuEvaluator& evaluator(std::size_t i) { return *m_slots.at(i)->evaluator; }

    // Runs fn(GpuEvaluator&) on a free usable worker, holding it; throws when none is usable.
    template <class Fn> auto withFreeWorker(const CancelToken& cancel, Fn&& fn)
    {
        const int i = acquire({}, cancel);
        if (i < 0)
            throw std::runtime_error(noWorkerLeft());
        struct Release {
            WorkerPool* pool;
            int i;
            ~Release() { pool->release(i, nullptr); }
        } release { this, i };
        return fn(*m_slots[static_cast<std::size_t>(i)]->evaluator);
    }

private:
    struct Slot {
        WorkerSpec spec;
        std::unique_ptr<GpuEvaluator> evaluator;
        PoolWorkerStatus status;
        bool busy = false;
        bool usable = true;
        std::chrono::steady_clock::time_point retryAt {}; // lost: not taken before this
        int failedStarts = 0; // in a row, since it was lost
        bool ranBefore = false; // started once: a failed start later is a lost connection, reconnected
    };
    PoolWorkerStatus statusOf(const Slot& s) const; // under m_mutex
    void backOff(Slot& s, const std::string& why); // under m_mutex
    int acquire(const std::set<int>& avoid, const CancelToken& cancel); // -1: no usable worker outside avoid
    void release(int i, const Evaluation* measured);
    void markUnavailable(Slot& s, const std::string& why); // under m_mutex
    Evaluation runOn(int i, const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel);
    std::string noWorkerLeft() const; // under m_mutex or not: reads the slots' errors

    Problem m_problem;
    std::vector<std::unique_ptr<Slot>> m_slots;
    mutable std::mutex m_mutex;
    std::condition_variable m_cv;
    int m_waiting = 0;
    double m_firstBackoffSeconds = 1;
    double m_maxBackoffSeconds = 60;
    int m_reconnectAttempts = 5;
    mutable DeviceInfo m_device;
};

// Rewrites the session's workers.status.json whenever the pool's snapshot changed (kloop run calls update() from its
// watcher thread), so a workbench following the run shows its workers live; and says when a worker is lost or given
// up (onLoss, e.g. a note in the journal), so no loss goes unrecorded.
class PoolStatusWriter {
public:
    PoolStatusWriter(
        const WorkerPool& pool, std::filesystem::path sessionDir, std::function<void(const std::string&)> onLoss = {})
        : m_pool(pool)
        , m_dir(std::move(sessionDir))
        , m_onLoss(std::move(onLoss))
    {
    }
    void update(); // never throws: a failed write is said once on stderr, and the run goes on

private:
    const WorkerPool& m_pool;
    std::filesystem::path m_dir;
    std::function<void(const std::string&)> m_onLoss;
    std::optional<PoolSnapshot> m_last;
    bool m_warned = false;
};

// The profiler of a pool: profiles on whichever worker is free.
class PoolProfiler final : public Profiler {
public:
    explicit PoolProfiler(WorkerPool& pool)
        : m_pool(pool)
    {
    }
    CandidateProfile profile(const Candidate& c, const CancelToken& cancel) override;

private:
    WorkerPool& m_pool;
};

} // namespace kl
