// The GPU pool (kernels/pool/worker_pool.h) with local workers (the test double), and `kloop run --workers`.
#include "core/errors.h"
#include "core/session_store.h"
#include "kernels/pool/worker_pool.h"
#include "pool_test_support.h"
#include "tests/support/temp_dir.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <set>

namespace fs = std::filesystem;
using namespace kl;
using namespace kl::test;

TEST(WorkerPool, EachWorkerMeasuresWhatItIsGivenAndSaysWhichGpu)
{
    const Problem p = poolProblem();
    WorkerPool pool(p, parseWorkerSpecs("local:0,local:1"), doubleOptions());
    ASSERT_EQ(pool.start(), 2);
    const auto a = markedCandidate(p, "a", "kl-test-double: time-sleep-ms=1500");
    const auto b = markedCandidate(p, "b", "kl-test-double: time-sleep-ms=1500");
    auto fa = std::async(std::launch::async, [&] { return pool.evaluate(a, quick(), CancelToken()); });
    auto fb = std::async(std::launch::async, [&] { return pool.evaluate(b, quick(), CancelToken()); });
    const Evaluation ea = fa.get();
    const Evaluation eb = fb.get();
    EXPECT_EQ(ea.verdict, Verdict::Correct) << reasonsOf(ea);
    EXPECT_EQ(eb.verdict, Verdict::Correct) << reasonsOf(eb);
    EXPECT_EQ((std::set<std::string> { ea.measuredOn.worker, eb.measuredOn.worker }),
        (std::set<std::string> { "local:0", "local:1" }))
        << "two evaluations at once run on the two workers";
    EXPECT_EQ(ea.measuredOn.gpu, "test double (no GPU)");
    EXPECT_NE(ea.measuredOn.uuid, eb.measuredOn.uuid) << "CUDA_VISIBLE_DEVICES tells the double's GPUs apart";
    for (const auto& s : ea.shapes) {
        if (s.timing) {
            EXPECT_TRUE(s.baselineTiming) << "the baseline is timed with the candidate, on its GPU";
        }
    }
    const auto status = pool.status();
    ASSERT_EQ(status.size(), 2u);
    for (const auto& w : status) {
        EXPECT_EQ(w.state, "idle");
        EXPECT_EQ(w.evaluations, 1) << w.id;
        EXPECT_EQ(w.transport, "local");
        EXPECT_GT(w.pid, 0);
    }
}

TEST(WorkerPool, AKilledWorkersEvaluationIsRetriedOnceElsewhere)
{
    const Problem p = poolProblem();
    const fs::path busy = busyFile("retry");
    fs::remove(busy);
    WorkerPool pool(
        p, parseWorkerSpecs("local:0,local:1"), doubleOptions({ { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } }));
    ASSERT_EQ(pool.start(), 2);
    const auto c = markedCandidate(p, "c", "kl-test-double: time-sleep-ms=2000");
    auto f = std::async(std::launch::async, [&] { return pool.evaluate(c, quick(), CancelToken()); });
    const long pid = waitForBusyWorker(busy);
    ASSERT_GT(pid, 0) << "no worker began the time op";
    fs::remove(busy);
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "a killed worker hung the pool";
    const Evaluation e = f.get();
    EXPECT_EQ(e.verdict, Verdict::Correct) << reasonsOf(e);
    EXPECT_TRUE(hasRule(e, "worker.retried")) << reasonsOf(e);
    const auto status = pool.status();
    const auto killed = std::find_if(status.begin(), status.end(), [](const auto& w) { return w.lost == 1; });
    ASSERT_NE(killed, status.end());
    EXPECT_NE(e.measuredOn.worker, killed->id) << "measured by the worker that finished it";
    EXPECT_NE(reasonsOf(e).find("worker " + killed->id + " was lost"), std::string::npos) << reasonsOf(e);
}

TEST(WorkerPool, ALoneWorkersCrashIsRecordedNotRetried)
{
    const Problem p = poolProblem();
    const fs::path busy = busyFile("alone");
    fs::remove(busy);
    WorkerPool pool(p, parseWorkerSpecs("local"), doubleOptions({ { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } }));
    ASSERT_EQ(pool.start(), 1);
    const auto c = markedCandidate(p, "c", "kl-test-double: time-sleep-ms=2000");
    auto f = std::async(std::launch::async, [&] { return pool.evaluate(c, quick(), CancelToken()); });
    const long pid = waitForBusyWorker(busy);
    ASSERT_GT(pid, 0);
    fs::remove(busy);
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    const Evaluation e = f.get();
    EXPECT_EQ(e.verdict, Verdict::Crashed);
    EXPECT_TRUE(hasRule(e, "worker.crashed")) << reasonsOf(e);
    EXPECT_FALSE(hasRule(e, "worker.retried"));
    EXPECT_EQ(pool.status()[0].lost, 1);
}

TEST(WorkerPool, AWorkerThatCannotStartIsPassedOverAndNoneLeftStopsTheRun)
{
    const Problem p = poolProblem();
    const fs::path file = fs::temp_directory_path() / ("kl-pool-workers-" + std::to_string(::getpid()) + ".json");
    std::ofstream(file) << R"({"workers": [{"spec": "local:0", "worker": "/nonexistent/kloop-worker"},
                                           {"spec": "local:1"}]})";
    WorkerPool pool(p, parseWorkerSpecs(file.string()), doubleOptions());
    EXPECT_EQ(pool.start(), 1);
    EXPECT_EQ(pool.status()[0].state, "unavailable");
    EXPECT_NE(pool.status()[0].lastError.find("/nonexistent/kloop-worker"), std::string::npos)
        << pool.status()[0].lastError;
    const Evaluation e = pool.evaluate(markedCandidate(p, "c", "x"), quick(), CancelToken());
    EXPECT_EQ(e.measuredOn.worker, "local:1");

    std::ofstream(file) << R"({"workers": [{"spec": "local", "worker": "/nonexistent/kloop-worker"}]})";
    WorkerPool dead(p, parseWorkerSpecs(file.string()), doubleOptions());
    EXPECT_EQ(dead.start(), 0);
    EXPECT_THROW(dead.evaluate(markedCandidate(p, "c", "x"), quick(), CancelToken()), std::runtime_error)
        << "no worker: the loop stops instead of recording a rejection";
    fs::remove(file);
}

TEST(WorkerPool, ALostWorkerIsReconnectedAfterItsBackoff)
{
    const Problem p = poolProblem();
    const fs::path busy = busyFile("backoff");
    fs::remove(busy);
    WorkerPool pool(p, parseWorkerSpecs("local"), doubleOptions({ { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } }));
    pool.setReconnectPolicy(1.5, 60, 5);
    ASSERT_EQ(pool.start(), 1);
    const auto killed = evaluateAndKillMidway(pool, p, busy, quick());
    ASSERT_TRUE(killed) << "no worker began the time op, or the pool hung";
    EXPECT_EQ(killed->verdict, Verdict::Crashed) << "recorded, with nowhere else to retry";
    const auto lost = pool.status()[0];
    EXPECT_EQ(lost.state, "lost");
    EXPECT_GT(lost.reconnectInSeconds, 0);
    EXPECT_NE(lost.lastError.find("died"), std::string::npos) << lost.lastError;

    const auto before = std::chrono::steady_clock::now();
    const Evaluation again = pool.evaluate(markedCandidate(p, "d", "x"), quick(), CancelToken());
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
    EXPECT_EQ(again.verdict, Verdict::Correct) << reasonsOf(again);
    EXPECT_GE(waited, 1.0) << "the next evaluation waited out the backoff before starting the worker again";
    const auto back = pool.status()[0];
    EXPECT_EQ(back.state, "idle");
    EXPECT_EQ(back.starts, 2);
    EXPECT_EQ(back.reconnectInSeconds, 0);
}

TEST(WorkerPool, TheStatusWriterSaysEachLossOnceAndWritesTheSnapshot)
{
    const Problem p = poolProblem();
    const fs::path busy = busyFile("writer");
    const fs::path dir = kl::test::freshDir("pool-run-writer");
    fs::create_directories(dir);
    fs::remove(busy);
    WorkerPool pool(
        p, parseWorkerSpecs("local:0,local:1"), doubleOptions({ { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } }));
    ASSERT_EQ(pool.start(), 2);
    std::vector<std::string> said;
    PoolStatusWriter writer(pool, dir, [&](const std::string& loss) { said.push_back(loss); });
    writer.update();
    ASSERT_TRUE(readPoolStatus(dir));
    EXPECT_EQ(readPoolStatus(dir)->workers.size(), 2u);
    EXPECT_TRUE(said.empty());
    ASSERT_TRUE(evaluateAndKillMidway(pool, p, busy, quick()));
    writer.update();
    writer.update();
    ASSERT_EQ(said.size(), 1u) << "one loss, said once";
    EXPECT_NE(said[0].find("was lost (reconnecting after a backoff)"), std::string::npos) << said[0];
    int lost = 0;
    const auto onDisk = readPoolStatus(dir);
    ASSERT_TRUE(onDisk);
    for (const auto& w : onDisk->workers)
        lost += w.lost;
    EXPECT_EQ(lost, 1) << "the snapshot on disk has it";
    fs::remove_all(dir);
}

TEST(WorkerPool, AWorkerThatCannotBeReconnectedIsGivenUpNotRetriedForever)
{
    const Problem p = poolProblem();
    const fs::path busy = busyFile("giveup");
    const fs::path gate = busyFile("giveup-gate");
    const fs::path wrapper = busyFile("giveup-worker.sh");
    fs::remove(busy);
    std::ofstream(gate) << "open";
    // The worker's host: it starts the worker while the gate is there, and refuses once it is gone.
    std::ofstream(wrapper) << "#!/bin/sh\n[ -e '" << gate.string()
                           << "' ] || { echo 'host is down' >&2; exit 3; }\nexec '" << KL_FAKE_WORKER_PATH
                           << "' \"$@\"\n";
    fs::permissions(wrapper, fs::perms::owner_all);
    GpuEvaluatorOptions o = doubleOptions({ { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } });
    o.worker.command = { wrapper.string() };
    WorkerPool pool(p, parseWorkerSpecs("local"), o);
    pool.setReconnectPolicy(0.05, 0.2, 3);
    ASSERT_EQ(pool.start(), 1) << pool.status()[0].lastError;
    const auto killed = evaluateAndKillMidway(pool, p, busy, quick(), nullptr, [&] { fs::remove(gate); });
    ASSERT_TRUE(killed);
    EXPECT_EQ(killed->verdict, Verdict::Crashed);
    auto next = std::async(
        std::launch::async, [&] { return pool.evaluate(markedCandidate(p, "d", "x"), quick(), CancelToken()); });
    ASSERT_EQ(next.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "three reconnects, then it stops";
    EXPECT_THROW(next.get(), std::runtime_error) << "no worker left: the loop stops";
    const auto gone = pool.status()[0];
    EXPECT_EQ(gone.state, "unavailable");
    EXPECT_NE(gone.lastError.find("gave up after 3 failed reconnects"), std::string::npos) << gone.lastError;
    EXPECT_EQ(gone.starts, 4) << "the first start and three reconnects";
    fs::remove(wrapper);
    fs::remove(busy);
}

namespace {

// Two workers of the test double posing as two GPU models.
fs::path mixedModelWorkers(const std::string& tag)
{
    return writeWorkers(tag,
        { { { "spec", "local:0" }, { "environment", { { "KL_FAKE_WORKER_DEVICE", "Model A" } } } },
            { { "spec", "local:1" }, { "environment", { { "KL_FAKE_WORKER_DEVICE", "Model B" } } } } });
}

} // namespace

TEST(WorkerPool, AWorkerAskedToCompileGetsTheSourceAndTheClientCompilesNothing)
{
    const Problem p = poolProblem();
    auto clientCompiled = [](const fs::path& cache) {
        std::error_code ec;
        return fs::exists(cache, ec) ? std::distance(fs::directory_iterator(cache), fs::directory_iterator()) : 0;
    };
    for (const bool onWorker : { false, true }) {
        SCOPED_TRACE(onWorker ? "compile: worker" : "compile: client");
        const fs::path file
            = writeWorkers("compile", { { "spec", "local" }, { "compile", onWorker ? "worker" : "client" } });
        GpuEvaluatorOptions o = doubleOptions();
        o.compileCacheDir = kl::test::freshDir(onWorker ? "pool-cache-worker" : "pool-cache-client");
        WorkerPool pool(p, parseWorkerSpecs(file.string()), o);
        ASSERT_EQ(pool.start(), 1);
        const Candidate c = markedCandidate(p, "c", onWorker ? "compiled there" : "compiled here");
        EXPECT_TRUE(pool.compile(c).ok);
        const Evaluation e = pool.evaluate(c, quick(), CancelToken());
        // Verified and timed either way; without the PTX rules a human looks before it counts.
        EXPECT_EQ(e.verdict, onWorker ? Verdict::PendingReview : Verdict::Correct) << reasonsOf(e);
        EXPECT_TRUE(e.correctEverywhere());
        EXPECT_GT(e.objective, 0);
        EXPECT_TRUE(e.compile.ok);
        EXPECT_EQ(hasRule(e, "referee.ptx-unchecked"), onWorker) << reasonsOf(e);
        EXPECT_EQ(clientCompiled(o.compileCacheDir) == 0, onWorker)
            << "the client's NVRTC cache holds the CUBIN only when the client compiled";

        Candidate broken = c;
        broken.id = "broken";
        broken.source += "\nthis is not CUDA;\n";
        const Evaluation bad = pool.evaluate(broken, quick(), CancelToken());
        EXPECT_EQ(bad.verdict, Verdict::CompileFailed) << reasonsOf(bad);
        EXPECT_NE(bad.compile.log.find("error"), std::string::npos) << "the compiler's own log: " << bad.compile.log;
        fs::remove_all(o.compileCacheDir);
        fs::remove(file);
    }
}

TEST(WorkerPool, APoolOfTwoArchitecturesCompilesACubinForEach)
{
    const Problem p = poolProblem();
    const fs::path file = writeWorkers("archs",
        { { { "spec", "local:0" } },
            { { "spec", "local:1" }, { "environment", { { "KL_FAKE_WORKER_ARCH", "sm_86" } } } } });
    GpuEvaluatorOptions o = doubleOptions();
    o.compileCacheDir = kl::test::freshDir("pool-run-cache-archs");
    WorkerPool pool(p, parseWorkerSpecs(file.string()), o);
    ASSERT_EQ(pool.start(), 2);
    std::set<std::string> archs;
    for (const auto& w : pool.status())
        archs.insert(w.arch);
    ASSERT_EQ(archs.size(), 2u);
    const Candidate c = markedCandidate(p, "c", "two archs");
    ASSERT_TRUE(pool.compile(c).ok);
    std::set<std::string> cubins;
    for (const auto& f : fs::directory_iterator(o.compileCacheDir))
        if (f.path().extension() == ".cubin")
            cubins.insert(f.path().stem().string());
    EXPECT_EQ(cubins.size(), 2u) << "one CUBIN per architecture in the pool";
    // Each worker then evaluates its own architecture's CUBIN, found in the cache.
    auto fa = std::async(std::launch::async, [&] {
        return pool.evaluate(
            markedCandidate(p, "a", "kl-test-double: time-sleep-ms=500\n// two archs"), quick(), CancelToken());
    });
    const Evaluation eb = pool.evaluate(
        markedCandidate(p, "b", "kl-test-double: time-sleep-ms=500\n// two archs"), quick(), CancelToken());
    const Evaluation ea = fa.get();
    EXPECT_EQ(ea.verdict, Verdict::Correct) << reasonsOf(ea);
    EXPECT_EQ(eb.verdict, Verdict::Correct) << reasonsOf(eb);
    fs::remove_all(o.compileCacheDir);
    fs::remove(file);
}

TEST(WorkerPool, AMixedPoolJudgesAJumpAgainstTheBestOfTheGpuThatMeasuresIt)
{
    const Problem p = poolProblem();
    const fs::path file = mixedModelWorkers("jump");
    WorkerPool pool(p, parseWorkerSpecs(file.string()), doubleOptions());
    ASSERT_EQ(pool.start(), 2);
    EXPECT_EQ(pool.deviceFor({ "local:1", "Model B", "" })->name, "Model B");
    EXPECT_EQ(pool.deviceFor({ "ssh:elsewhere", "Model A", "" })->name, "Model A") << "any worker of that model";
    EXPECT_FALSE(pool.deviceFor({ "local:0", "Model C", "" })) << "no GPU of that model: nothing to key it by";

    // The double times this ~3x the naive baseline; only Model A has a best (1.0), so a 3x result is a suspicious
    // jump there and, on Model B, a first measurement with nothing to jump over.
    EvaluateOptions opt = quick();
    CurrentBest bestOnA;
    bestOnA.objective = 1.0;
    bestOnA.reviewJumpFactor = 2.0;
    opt.best = bestOnA; // what the loop tells a single GPU: the session's best, whatever measured it
    opt.bestByGpu = { { "Model A", bestOnA } };
    auto fast = [&](const std::string& id) {
        Candidate c = markedCandidate(p, id, "kl-test-double: time-sleep-ms=800");
        c.source += "\n// kl-test-double: efficiency=0.9\n";
        return c;
    };
    auto fa = std::async(std::launch::async, [&] { return pool.evaluate(fast("a"), opt, CancelToken()); });
    auto fb = std::async(std::launch::async, [&] { return pool.evaluate(fast("b"), opt, CancelToken()); });
    const Evaluation ea = fa.get();
    const Evaluation eb = fb.get();
    ASSERT_NE(ea.measuredOn.gpu, eb.measuredOn.gpu) << "one on each model";
    for (const Evaluation* e : { &ea, &eb }) {
        ASSERT_GT(e->objective, 2.0) << reasonsOf(*e);
        EXPECT_EQ(hasRule(*e, "physics.suspicious-jump"), e->measuredOn.gpu == "Model A")
            << e->measuredOn.gpu << ": " << reasonsOf(*e);
    }
    fs::remove(file);
}

namespace {

int runKloop(const std::string& args, const std::string& env = "")
{
    const std::string cmd = env + " KL_WORKER=" KL_FAKE_WORKER_PATH " " KLOOP_PATH " " + args + " >/dev/null 2>&1";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

} // namespace

TEST(KloopRunWorkers, APoolOfFourRecordsWhichGpuMeasuredEachEvaluation)
{
    const fs::path session = kl::test::freshDir("pool-run-four");
    ASSERT_EQ(runKloop("run --problem rmsnorm --agent tuner:random --budget 10 --no-tuning-db --session "
                  + session.string() + " --workers local:0,local:1,local:2,local:3"),
        0);
    auto store = SessionStore::open(session);
    const Session& s = store->session();
    std::set<std::string> workers;
    int measured = 0;
    for (const auto& [id, e] : s.evaluations) {
        if (e.measuredOn.empty())
            continue;
        ++measured;
        workers.insert(e.measuredOn.worker);
        EXPECT_EQ(e.measuredOn.gpu, "test double (no GPU)");
        EXPECT_EQ(e.measuredOn.uuid, "GPU-test-double-" + e.measuredOn.worker.substr(6));
    }
    EXPECT_GE(measured, 8);
    EXPECT_GE(workers.size(), 2u) << "the pool spread the evaluations";
    // The journal reopened after four writers: every evaluation has its candidate, in order.
    for (const auto& [id, e] : s.evaluations) {
        EXPECT_TRUE(s.tree.contains(id)) << id;
    }
    // One leaderboard per GPU model, naming the workers that measured on it.
    std::string shown;
    if (FILE* p = ::popen((std::string(KLOOP_PATH) + " session show " + session.string()).c_str(), "r")) {
        char buf[4096];
        while (std::fgets(buf, sizeof buf, p))
            shown += buf;
        ::pclose(p);
    }
    EXPECT_NE(shown.find("leaderboard test double (no GPU) ("), std::string::npos) << shown;
    EXPECT_NE(shown.find("local:"), std::string::npos) << shown;
    // The pool as the run left it, for a workbench that follows the run (its Workers panel).
    const auto pool = readPoolStatus(session);
    ASSERT_TRUE(pool) << "kloop run --workers writes " << kPoolStatusFile;
    ASSERT_EQ(pool->workers.size(), 4u);
    int evaluations = 0;
    for (const auto& w : pool->workers) {
        EXPECT_EQ(w.state, "idle") << w.id;
        EXPECT_EQ(w.gpu, "test double (no GPU)");
        evaluations += w.evaluations;
    }
    EXPECT_GE(evaluations, measured);
    fs::remove_all(session);
}

TEST(KloopRunWorkers, AMixedPoolFilesEachMeasurementUnderTheGpuThatTookIt)
{
    const fs::path session = kl::test::freshDir("pool-run-mixed");
    const fs::path file = mixedModelWorkers("mixed-run");
    const fs::path db = kl::test::freshDir("pool-run-mixed-db") / "tuning.jsonl";
    ASSERT_EQ(runKloop("run --problem rmsnorm --agent tuner:random --budget 10 --tuning-db " + db.string()
                  + " --session " + session.string() + " --workers " + file.string()),
        0);
    std::ifstream lines(db);
    std::set<std::string> models;
    int records = 0;
    for (std::string line; std::getline(lines, line);) {
        const auto j = nlohmann::json::parse(line);
        if (!j.contains("evaluation") || !j["evaluation"].contains("measured_on"))
            continue;
        const std::string gpu = j["evaluation"]["measured_on"]["gpu"];
        const std::string device = j["key"]["device"];
        EXPECT_EQ(device.rfind(gpu + " ", 0), 0u) << "measured on " << gpu << ", keyed as " << device;
        models.insert(gpu);
        ++records;
    }
    EXPECT_GE(records, 8);
    EXPECT_EQ(models.size(), 2u) << "both models measured";
    fs::remove_all(session);
    fs::remove_all(db.parent_path());
    fs::remove(file);
}

TEST(KloopRunWorkers, BadSpecsAreUsageErrorsBeforeAnythingStarts)
{
    const fs::path session = kl::test::freshDir("pool-run-bad");
    EXPECT_EQ(runKloop("run --problem rmsnorm --agent tuner:random --budget 2 --no-tuning-db --session "
                  + session.string() + " --workers local,ssh:"),
        1);
    EXPECT_FALSE(fs::exists(session)) << "nothing written for a typo";
}
