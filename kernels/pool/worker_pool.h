#pragma once
// A GPU pool: one GpuEvaluator (and worker) per WorkerSpec, behind the one Evaluator the research loop knows. The
// loop runs one device thread per worker (LoopOptions::deviceThreads); each evaluate() takes a free worker, so the
// candidate and its interleaved baseline are always timed by one GPU. A worker that is lost mid-evaluation (a
// dropped connection, a killed process) has that evaluation retried once on another worker; the result says so
// (`worker.retried`) and records which GPU measured it (Evaluation::measuredOn). A worker that cannot start is
// passed over; with none left, evaluate() throws and the loop stops without recording anything false.
// Compilation stays on the client: one NVRTC pool shared by every worker, one CUBIN per distinct architecture.
#include "core/profile_summary.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/pool/worker_spec.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace kl {

// What the workbench's Workers panel and `kloop run` show of one worker.
struct PoolWorkerStatus {
    std::string id;
    std::string transport; // local, ssh, slurm
    std::string state; // starting, idle, busy, unavailable
    std::string gpu;
    std::string uuid;
    std::string arch;
    std::string host;
    long pid = 0; // on its host
    std::string candidate; // being evaluated
    int evaluations = 0;
    int lost = 0; // evaluations lost with this worker
    int starts = 0;
    int smClockMHz = 0; // at its last measurement
    int memClockMHz = 0;
    std::string lastError;
};

class WorkerPool final : public Evaluator {
public:
    WorkerPool(Problem problem, std::vector<WorkerSpec> specs, GpuEvaluatorOptions options = {});
    ~WorkerPool() override;

    // Starts every worker at once; returns how many started (the others are "unavailable", with their error).
    int start();

    const DeviceInfo& device() const override; // the first usable worker's: the session's header
    const Problem& problem() const override { return m_problem; }
    CompileReport compile(const Candidate& c) override; // for every distinct architecture in the pool
    Evaluation evaluate(const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel) override;

    std::size_t size() const { return m_slots.size(); }
    std::vector<PoolWorkerStatus> status() const;
    int waiting() const; // evaluations waiting for a free worker
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
    };
    int acquire(const std::set<int>& avoid, const CancelToken& cancel); // -1: no usable worker outside avoid
    void release(int i, const Evaluation* measured);
    void markUnavailable(int i, const std::string& why);
    Evaluation runOn(int i, const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel);
    std::string noWorkerLeft() const; // under m_mutex or not: reads the slots' errors

    Problem m_problem;
    std::vector<std::unique_ptr<Slot>> m_slots;
    mutable std::mutex m_mutex;
    std::condition_variable m_cv;
    int m_waiting = 0;
    mutable DeviceInfo m_device;
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
