// The pool's remote transports with the real engines on loopback (loopback_engines.*): ssh to a real sshd, and
// srun in a real single-node Slurm, each reaching the worker test double; kill -9 of a remote worker in the
// middle of an evaluation is a lost worker whose evaluation is retried, never a hang.
#include "kernels/pool/worker_pool.h"
#include "pool_test_support.h"

#include <algorithm>
#include <cstdlib>
#include <future>
#include <gtest/gtest.h>

namespace fs = std::filesystem;
using namespace kl;
using namespace kl::test;

namespace {

// kill -9 of the worker that begins the slow time op; the evaluation must come back, measured elsewhere.
void killMidEvaluationAndExpectRetry(WorkerPool& pool, const Problem& p, const fs::path& busy)
{
    fs::remove(busy);
    const auto c = markedCandidate(p, "slow", "kl-test-double: time-sleep-ms=3000");
    auto f = std::async(std::launch::async, [&] { return pool.evaluate(c, quick(), CancelToken()); });
    const long pid = waitForBusyWorker(busy);
    ASSERT_GT(pid, 0) << "no worker began the time op";
    fs::remove(busy);
    const auto before = pool.status();
    std::string victim;
    for (const auto& w : before)
        if (w.pid == pid)
            victim = w.id;
    ASSERT_FALSE(victim.empty()) << "the busy pid is a pool worker's (its hello's pid)";
    ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
    ASSERT_EQ(f.wait_for(std::chrono::seconds(90)), std::future_status::ready)
        << "a killed remote worker hung the pool";
    const Evaluation e = f.get();
    EXPECT_EQ(e.verdict, Verdict::Correct) << reasonsOf(e);
    EXPECT_TRUE(hasRule(e, "worker.retried")) << reasonsOf(e);
    EXPECT_NE(reasonsOf(e).find("worker " + victim + " was lost"), std::string::npos) << reasonsOf(e);
    EXPECT_NE(e.measuredOn.worker, victim);
    for (const auto& w : pool.status()) {
        if (w.id == victim) {
            EXPECT_EQ(w.lost, 1);
        }
    }
}

} // namespace

TEST(SshWorkers, ThroughARealSshdMeasureAndAKilledOneIsRetried)
{
    std::string why;
    auto sshd = LoopbackSshd::start(&why);
    if (!sshd)
        GTEST_SKIP() << why;
    const Problem p = poolProblem();
    const fs::path busy = busyFile("ssh");
    const fs::path file = writeWorkers("ssh", { sshWorker(*sshd, 0, busy), sshWorker(*sshd, 1, busy) });
    WorkerPool pool(p, parseWorkerSpecs(file.string()), doubleOptions());
    ASSERT_EQ(pool.start(), 2) << pool.status()[0].lastError << " / " << pool.status()[1].lastError;
    for (const auto& w : pool.status()) {
        EXPECT_EQ(w.transport, "ssh");
        EXPECT_EQ(w.gpu, "test double (no GPU)");
    }
    EXPECT_EQ(pool.status()[1].uuid, "GPU-test-double-1") << "ssh:HOST:PORT:GPU pins the remote GPU";
    const Evaluation plain = pool.evaluate(markedCandidate(p, "plain", "x"), quick(), CancelToken());
    EXPECT_EQ(plain.verdict, Verdict::Correct) << reasonsOf(plain);
    EXPECT_EQ(plain.measuredOn.worker.rfind("ssh:127.0.0.1:", 0), 0u);
    killMidEvaluationAndExpectRetry(pool, p, busy);
    fs::remove(file);
}

TEST(SshWorkers, AnUnknownHostKeyIsRefusedNotAccepted)
{
    std::string why;
    auto sshd = LoopbackSshd::start(&why);
    if (!sshd)
        GTEST_SKIP() << why;
    sshd->forgetHostKey();
    const fs::path file = writeWorkers("hostkey", { sshWorker(*sshd, 0, busyFile("hostkey")) });
    WorkerPool pool(poolProblem(), parseWorkerSpecs(file.string()), doubleOptions());
    EXPECT_EQ(pool.start(), 0) << "BatchMode with StrictHostKeyChecking: no prompt, no trust on first use";
    EXPECT_EQ(pool.status()[0].state, "unavailable");
    fs::remove(file);
}

TEST(SshWorkers, KloopRunWithAWorkersFileReachesTheSshWorker)
{
    std::string why;
    auto sshd = LoopbackSshd::start(&why);
    if (!sshd)
        GTEST_SKIP() << why;
    const fs::path file = writeWorkers("run", { sshWorker(*sshd, 0, busyFile("run")) });
    const fs::path session = fs::temp_directory_path() / ("kl-pool-ssh-run-" + std::to_string(::getpid()));
    fs::remove_all(session);
    const std::string cmd = std::string(KLOOP_PATH) + " run --problem rmsnorm --agent tuner:random --budget 4 "
        + "--no-tuning-db --session " + session.string() + " --workers " + file.string() + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    auto store = SessionStore::open(session);
    int viaSsh = 0;
    for (const auto& [id, e] : store->session().evaluations)
        viaSsh += e.measuredOn.worker.rfind("ssh:", 0) == 0;
    EXPECT_GE(viaSsh, 3);
    fs::remove_all(session);
    fs::remove(file);
}

TEST(SlurmWorkers, ThroughSrunInARealClusterMeasureAndAKilledOneIsRetried)
{
    std::string why;
    auto slurm = LoopbackSlurm::start(&why);
    if (!slurm)
        GTEST_SKIP() << why;
    const Problem p = poolProblem();
    const fs::path busy = busyFile("slurm");
    const fs::path file = writeWorkers("slurm", slurmWorkers(*slurm, 2, busy));
    WorkerPool pool(p, parseWorkerSpecs(file.string()), doubleOptions());
    ASSERT_EQ(pool.start(), 2) << pool.status()[0].lastError << " / " << pool.status()[1].lastError;
    for (const auto& w : pool.status())
        EXPECT_EQ(w.transport, "slurm");
    const Evaluation plain = pool.evaluate(markedCandidate(p, "plain", "x"), quick(), CancelToken());
    EXPECT_EQ(plain.verdict, Verdict::Correct) << reasonsOf(plain);
    EXPECT_EQ(plain.measuredOn.worker.rfind("slurm:" + slurm->partition() + "#", 0), 0u);
    killMidEvaluationAndExpectRetry(pool, p, busy);
    fs::remove(file);
}
