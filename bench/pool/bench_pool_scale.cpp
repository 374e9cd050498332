// bench_pool_scale: where the client of a GPU pool becomes the bottleneck (issue 17).
//   bench_pool_scale [--transport local|ssh] [--workers 1,4,16,64] [--per-worker K] [--sleep-ms S]
//                    [--worker PATH] [--problem NAME]
// For each N: a WorkerPool of N workers (local:i, or ssh:127.0.0.1:PORT:i through a loopback sshd the bench
// starts), every worker started and the candidates compiled first; then N threads evaluate K distinct candidates
// each (verify + time with the interleaved baseline). Prints one markdown row per N: evaluations per minute, the
// client's CPU (user+sys of this process) per evaluation, and the median ping round trip of worker 0 (the
// transport's own latency). --sleep-ms makes the test double's time op last S ms (a stand-in for GPU time);
// --worker PATH runs that worker instead (the real kloop-worker on a GPU machine; sleep markers are then inert).
#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"
#include "kernels/pool/worker_pool.h"
#include "loopback_engines.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <sys/resource.h>
#include <thread>

#ifndef KL_FAKE_WORKER_PATH
#define KL_FAKE_WORKER_PATH "kloop-worker"
#endif

namespace fs = std::filesystem;
using namespace kl;

namespace {

double cpuSeconds()
{
    rusage u {};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec)
        + static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::vector<int> counts(const std::string& text)
{
    std::vector<int> out;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ','))
        out.push_back(std::stoi(item));
    return out;
}

struct Row {
    int workers = 0;
    int evaluations = 0;
    int failed = 0;
    double wallSeconds = 0;
    double cpuSeconds = 0;
    double pingUs = 0;
};

} // namespace

int main(int argc, char** argv)
{
    std::string transport = "local";
    std::string workerList = "1,4,16,64";
    std::string worker = KL_FAKE_WORKER_PATH;
    std::string problemName = "rmsnorm";
    int perWorker = 8;
    int sleepMs = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const std::string v = argv[i + 1];
        if (k == "--transport")
            transport = v;
        else if (k == "--workers")
            workerList = v;
        else if (k == "--per-worker")
            perWorker = std::stoi(v);
        else if (k == "--sleep-ms")
            sleepMs = std::stoi(v);
        else if (k == "--worker")
            worker = v;
        else if (k == "--problem")
            problemName = v;
        else {
            std::cerr << "bench_pool_scale: unknown option " << k << "\n";
            return 2;
        }
    }
    if (transport != "local" && transport != "ssh") {
        std::cerr << "bench_pool_scale: --transport is local or ssh\n";
        return 2;
    }
    std::unique_ptr<test::LoopbackSshd> sshd;
    if (transport == "ssh") {
        std::string why;
        sshd = test::LoopbackSshd::start(&why);
        if (!sshd) {
            std::cerr << "bench_pool_scale: no sshd: " << why << "\n";
            return 1;
        }
    }
    const Problem problem = loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/" + problemName);
    const std::string templ = readFile(fs::path(problem.folder) / problem.templateFile);

    GpuEvaluatorOptions options;
    options.worker.command = { worker };
    options.worker.startTimeoutSeconds = 300;
    options.compileCacheDir = fs::temp_directory_path() / "kl-bench-pool-cache";
    EvaluateOptions eval;
    eval.heldOutCount = 1;
    eval.seed = 11;
    eval.maxSecondsPerShape = 0.5;

    std::cout << "| transport | workers | evaluations | failed | wall s | evaluations/min | client CPU ms/evaluation "
                 "| ping us (worker 0) |\n|---|---|---|---|---|---|---|---|\n";
    for (const int n : counts(workerList)) {
        std::string specs;
        for (int i = 0; i < n; ++i) {
            if (!specs.empty())
                specs += ",";
            specs += transport == "local" ? "local:" + std::to_string(i)
                                          : "ssh:127.0.0.1:" + std::to_string(sshd->port()) + ":" + std::to_string(i);
        }
        std::vector<WorkerSpec> parsed = parseWorkerSpecs(specs);
        for (auto& w : parsed)
            if (sshd) {
                w.sshOptions = sshd->sshOptions();
                w.worker = worker;
            }
        WorkerPool pool(problem, parsed, options);
        if (pool.start() != n) {
            for (const auto& w : pool.status())
                if (w.state == "unavailable")
                    std::cerr << w.id << ": " << w.lastError << "\n";
            return 1;
        }
        // Distinct candidates, compiled before the clock starts: the row measures the pool, not NVRTC.
        std::vector<Candidate> candidates;
        for (int i = 0; i < n * perWorker; ++i) {
            Candidate c;
            c.id = "c" + std::to_string(i);
            c.source = "// kl-test-double: time-sleep-ms=" + std::to_string(sleepMs) + "\n// bench candidate "
                + std::to_string(i) + "\n" + templ;
            (void)pool.compile(c);
            candidates.push_back(std::move(c));
        }
        std::vector<double> pings;
        for (int i = 0; i < 50; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            if (pool.evaluator(0).client().call(wire::PingRequest {}, 10).ok())
                pings.push_back(
                    std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(pings.begin(), pings.end());
        Row row;
        row.workers = n;
        row.pingUs = pings.empty() ? 0 : pings[pings.size() / 2];
        std::atomic<int> next { 0 };
        std::atomic<int> failed { 0 };
        const double cpu0 = cpuSeconds();
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> threads;
        for (int t = 0; t < n; ++t)
            threads.emplace_back([&] {
                for (int i; (i = next++) < static_cast<int>(candidates.size());) {
                    const Evaluation e = pool.evaluate(candidates[static_cast<std::size_t>(i)], eval, CancelToken());
                    if (e.verdict != Verdict::Correct && e.verdict != Verdict::PendingReview)
                        ++failed;
                }
            });
        for (auto& t : threads)
            t.join();
        row.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        row.cpuSeconds = cpuSeconds() - cpu0;
        row.evaluations = static_cast<int>(candidates.size());
        row.failed = failed.load();
        char line[512];
        std::snprintf(line, sizeof line, "| %s | %d | %d | %d | %.2f | %.0f | %.2f | %.0f |\n", transport.c_str(),
            row.workers, row.evaluations, row.failed, row.wallSeconds, row.evaluations / row.wallSeconds * 60.0,
            row.cpuSeconds * 1e3 / row.evaluations, row.pingUs);
        std::cout << line << std::flush;
    }
    return 0;
}
