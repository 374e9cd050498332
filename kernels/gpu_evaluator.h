#pragma once
// kl::Evaluator on top of kloop-worker: compile locally (NVRTC pool + content-addressed cache), then verify
// (with held-out shapes and the referee's dynamic mechanics) and time (interleaved with the baseline) in the
// worker, which owns the GPU. Crashes and hangs become verdicts; the worker is restarted behind the scenes.
#include "core/evaluator.h"
#include "kernels/nvrtc_compiler.h"
#include "kernels/worker_client.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

namespace kl {

struct GpuEvaluatorOptions {
    WorkerOptions worker;
    // Shared by a pool's evaluators, so a candidate is compiled once per architecture; nullptr: one of its own.
    std::shared_ptr<NvrtcCompiler> compiler;
    std::filesystem::path compileCacheDir = defaultCompileCacheDir();
    unsigned compileThreads = 0; // 0: hardware concurrency
    std::string arch; // empty: the worker's device; set it to compile without a GPU
    double verifyTimeoutSeconds = 120; // per verify request: a hung kernel costs at most this
    double timeTimeoutSlackSeconds = 60;
    bool cupti = true; // compare kernel records with the launch plan during verification
    bool graphCheck = true;
    double targetRelCi = 0.01; // stop timing when the median's 95% CI half width is within this fraction
    int minSamples = 10;
    std::string graphMode = "auto"; // auto | always | never
    bool verifyTuningShapes = true; // tuning shapes are verified too, not only the problem's verify_shapes
    bool recheckTimedOutputs = true;
    bool staticChecks = true; // referee::checkSource before compiling, when the referee is built in
    bool ptxChecks = true; // referee::checkPtx on the compiled PTX, before anything runs
    bool physicsChecks = true;
    // The worker's host compiles CUDA candidates (op compile, its NVRTC for its GPU) instead of this client: for a
    // client with few cores. The client then has no PTX, so the PTX rules cannot run; the result says so
    // (referee.ptx-unchecked, which asks for review).
    bool compileOnWorker = false;
};

class GpuEvaluator final : public Evaluator {
public:
    GpuEvaluator(Problem problem, GpuEvaluatorOptions options = {});
    ~GpuEvaluator() override;

    const DeviceInfo& device() const override;
    const Problem& problem() const override { return m_problem; }
    CompileReport compile(const Candidate& c) override;
    Evaluation evaluate(const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel) override;

    // The candidate built from the problem's template (or baseline) with given parameters.
    Candidate templateCandidate(const ParamValues& params, const std::string& id = "template") const;
    Candidate baselineCandidate(const std::string& id = "baseline") const;
    std::shared_ptr<const CompiledModule> compileModule(const Candidate& c);
    // Queues the compile on the pool (for sweeps that compile ahead of the GPU); evaluate() then hits the cache.
    std::future<std::shared_ptr<const CompiledModule>> compileAsync(const Candidate& c);
    wire::CandidateWire candidateWire(const Candidate& c, const CompiledModule& m) const;
    nlohmann::json candidateRequest(const Candidate& c, const CompiledModule& m) const; // its wire form
    WorkerClient& client() { return *m_client; }
    NvrtcCompiler& compiler() { return *m_compiler; }
    std::string arch() const;
    const std::string& templateSource() const { return m_templateSource; }

    // Registers the problem with the worker (replayed after every restart). evaluate() calls it.
    void prepareWorker();
    // How the last evaluate() ended for the worker (read by the one who called it): a pool retries an evaluation
    // elsewhere when its worker was lost (a dropped connection, a process that died without a fatal reply) and
    // passes over a worker that could not start.
    enum class WorkerOutcome { Fine, Lost, Unavailable };
    WorkerOutcome lastWorkerOutcome() const { return m_lastOutcome; }

private:
    std::optional<CompileJob> jobFor(const Candidate& c, std::string* error) const;

    Problem m_problem;
    GpuEvaluatorOptions m_options;
    std::string m_referenceSource, m_baselineSource, m_templateSource;
    std::shared_ptr<NvrtcCompiler> m_compiler;
    std::unique_ptr<WorkerClient> m_client;
    mutable std::mutex m_clientMutex; // one owner of the GPU at a time
    mutable DeviceInfo m_device; // written once, before m_deviceReady is set
    mutable std::atomic<bool> m_deviceReady { false };
    bool m_problemLoaded = false;
    WorkerOutcome m_lastOutcome = WorkerOutcome::Fine;
};

} // namespace kl
