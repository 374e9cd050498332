#pragma once
// What the pool's tests share: the problem they tune, candidates with the test double's markers, and waiting for
// the double to say it is in the middle of a time op (KL_FAKE_WORKER_BUSY_FILE).
#include "core/candidate.h"
#include "core/json_io.h"
#include "core/problem.h"
#include "core/session_store.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/pool/worker_pool.h"
#include "loopback_engines.h"
#include "tests/support/text_file.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>

namespace kl::test {

inline Problem poolProblem()
{
    return loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm");
}

// The problem's template with a marker line: a distinct source (and measurement) per tag.
inline Candidate markedCandidate(const Problem& p, const std::string& id, const std::string& marker)
{
    Candidate c;
    c.id = id;
    c.source = "// " + marker + "\n// " + id + "\n" + readFile(std::filesystem::path(p.folder) / p.templateFile);
    return c;
}

inline std::filesystem::path busyFile(const std::string& tag)
{
    return std::filesystem::temp_directory_path() / ("kl-pool-busy-" + std::to_string(::getpid()) + "-" + tag);
}

// The pid of the worker that began a slow time op, once it did (0 after timeoutSeconds).
inline long waitForBusyWorker(const std::filesystem::path& file, double timeoutSeconds = 60)
{
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(long(timeoutSeconds * 1000));
    while (std::chrono::steady_clock::now() < until) {
        if (std::filesystem::exists(file)) {
            const long pid = std::atol(kl::test::readTextFile(file).c_str());
            if (pid > 0)
                return pid;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
}

// Evaluates a slow candidate on the pool and kill -9s the worker that begins its time op (after beforeKill); the
// evaluation's result, or nullopt when no worker began it or the pool hung. killed: the worker's pid.
inline std::optional<Evaluation> evaluateAndKillMidway(WorkerPool& pool, const Problem& p,
    const std::filesystem::path& busy, const EvaluateOptions& opt, long* killed = nullptr,
    const std::function<void()>& beforeKill = {})
{
    std::filesystem::remove(busy);
    const Candidate c = markedCandidate(p, "slow", "kl-test-double: time-sleep-ms=2000");
    auto f = std::async(std::launch::async, [&] { return pool.evaluate(c, opt, CancelToken()); });
    const long pid = waitForBusyWorker(busy);
    if (pid <= 0)
        return std::nullopt;
    std::filesystem::remove(busy);
    if (beforeKill)
        beforeKill();
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    if (killed)
        *killed = pid;
    if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
        return std::nullopt;
    return f.get();
}

// Light evaluations (one held-out shape, a fixed seed): the pool's behaviour, not the measurements, is under test.
inline EvaluateOptions quick()
{
    EvaluateOptions o;
    o.heldOutCount = 1;
    o.seed = 7;
    return o;
}

inline bool hasRule(const Evaluation& e, const std::string& rule)
{
    return std::any_of(e.reasons.begin(), e.reasons.end(), [&](const VerdictReason& r) { return r.rule == rule; });
}

inline std::string reasonsOf(const Evaluation& e)
{
    std::string s;
    for (const auto& r : e.reasons)
        s += r.rule + ": " + r.message + "\n";
    return s;
}

#ifdef KL_FAKE_WORKER_PATH
// The test double as every pool worker's program (a spec's "worker" overrides it), with extra variables.
inline GpuEvaluatorOptions doubleOptions(const std::vector<std::pair<std::string, std::string>>& env = {})
{
    GpuEvaluatorOptions o;
    o.worker.command = { KL_FAKE_WORKER_PATH };
    o.worker.environment = env;
    o.compileCacheDir = std::filesystem::temp_directory_path() / ("kl-pool-cache-" + std::to_string(::getpid()));
    o.compileThreads = 2;
    o.worker.startTimeoutSeconds = 60; // ssh and srun take their time
    return o;
}

// A workers.json entry for the test double behind the loopback sshd, on the double's GPU `gpu`.
inline nlohmann::json sshWorker(const LoopbackSshd& sshd, int gpu, const std::filesystem::path& busy)
{
    return { { "spec", "ssh:127.0.0.1:" + std::to_string(sshd.port()) + ":" + std::to_string(gpu) },
        { "worker", KL_FAKE_WORKER_PATH }, { "ssh_options", sshd.sshOptions() },
        { "environment", { { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } } } };
}

// `count` test doubles in the loopback Slurm's partition.
inline nlohmann::json slurmWorkers(const LoopbackSlurm& slurm, int count, const std::filesystem::path& busy)
{
    return { { "spec", "slurm:" + slurm.partition() + ":" + std::to_string(count) }, { "worker", KL_FAKE_WORKER_PATH },
        { "environment", { { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } } } };
}
#endif

// A workers.json of these entries (one entry or an array of them); the caller removes it.
inline std::filesystem::path writeWorkers(const std::string& tag, const nlohmann::json& workers)
{
    const auto f
        = std::filesystem::temp_directory_path() / ("kl-workers-" + std::to_string(::getpid()) + "-" + tag + ".json");
    // A braced list of one entry arrives as that entry itself.
    const nlohmann::json list = workers.is_array() ? workers : nlohmann::json::array({ workers });
    std::ofstream(f) << nlohmann::json { { "workers", list } }.dump(2);
    return f;
}

} // namespace kl::test
