// The Workers panel against real pools of the worker test double (kl_test_fake_worker): local children, and the
// same behind the loopback sshd and the loopback Slurm of tests/pool (skipped, with the reason, where those engines
// cannot run). The panel reads only the pool's snapshots, on the GUI thread, while evaluations run on others; a
// kill -9 of a worker mid-evaluation shows as lost, with its error, and its evaluation is measured elsewhere.
#include "app/local_run.h"
#include "app/main_window.h"
#include "app/models/worker_table_model.h"
#include "app/session_controller.h"
#include "app/start_page.h"
#include "app/workers_panel.h"
#include "core/session_inbox.h"
#include "kernels/pool/worker_pool.h"
#include "tests/pool/pool_test_support.h"
#include "wait_until.h"

#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <future>
#include <gtest/gtest.h>
#include <set>

namespace fs = std::filesystem;
using namespace kl;
using namespace kl::app;
using kl::test::waitUntil;

namespace {

QString cell(const WorkerTableModel& m, int row, int column)
{
    return m.data(m.index(row, column)).toString();
}

int rowInState(const WorkerTableModel& m, const QString& state)
{
    for (int r = 0; r < m.rowCount(); ++r)
        if (cell(m, r, WorkerTableModel::StateColumn).startsWith(state))
            return r;
    return -1;
}

// The pool as the panel shows it: its workers, one busy with the slow candidate, killed, then lost with its error
// while its evaluation is measured on the other.
void panelFollowsThePoolThroughAKill(WorkerPool& pool, const fs::path& busy, const std::string& transport)
{
    ASSERT_EQ(pool.start(), 2) << pool.status()[0].lastError << " / " << pool.status()[1].lastError;
    WorkersPanel panel;
    panel.setLiveSource([&pool]() { return pool.snapshot(); });
    const WorkerTableModel& m = *panel.model();
    ASSERT_EQ(m.rowCount(), 2);
    for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(cell(m, r, WorkerTableModel::StateColumn), QStringLiteral("idle"));
        EXPECT_TRUE(cell(m, r, WorkerTableModel::GpuColumn).startsWith(QStringLiteral("test double (no GPU)")));
        EXPECT_TRUE(cell(m, r, WorkerTableModel::HostColumn).contains(QString::fromStdString(transport)))
            << cell(m, r, WorkerTableModel::HostColumn).toStdString();
    }

    fs::remove(busy);
    const Problem p = kl::test::poolProblem();
    const auto slow = kl::test::markedCandidate(p, "slow", "kl-test-double: time-sleep-ms=3000");
    auto f = std::async(std::launch::async, [&] { return pool.evaluate(slow, kl::test::quick(), CancelToken()); });
    const long pid = kl::test::waitForBusyWorker(busy);
    ASSERT_GT(pid, 0) << "no worker began the time op";
    fs::remove(busy);
    ASSERT_TRUE(waitUntil([&]() { return rowInState(m, QStringLiteral("busy")) >= 0; }, 5000))
        << "the panel shows the busy worker within a refresh";
    const int victim = rowInState(m, QStringLiteral("busy"));
    EXPECT_EQ(cell(m, victim, WorkerTableModel::InFlightColumn), QStringLiteral("slow"));
    EXPECT_TRUE(cell(m, victim, WorkerTableModel::HostColumn).contains(QStringLiteral("pid %1").arg(pid)))
        << "the busy worker is the one the panel names";
    const QString victimId = cell(m, victim, WorkerTableModel::WorkerColumn);

    ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
    // The GUI thread keeps turning while the pool notices and retries: the panel shows it lost, with why.
    ASSERT_TRUE(waitUntil(
        [&]() { return cell(m, m.rowOf(victimId), WorkerTableModel::StateColumn).startsWith(QStringLiteral("lost")); },
        90000))
        << cell(m, m.rowOf(victimId), WorkerTableModel::StateColumn).toStdString();
    const int lostRow = m.rowOf(victimId);
    EXPECT_EQ(cell(m, lostRow, WorkerTableModel::LostColumn), QStringLiteral("1"));
    EXPECT_FALSE(cell(m, lostRow, WorkerTableModel::ErrorColumn).isEmpty());
    EXPECT_TRUE(panel.summary().contains(QStringLiteral("1 lost or unavailable"))) << panel.summary().toStdString();
    ASSERT_EQ(f.wait_for(std::chrono::seconds(90)), std::future_status::ready);
    const Evaluation e = f.get();
    EXPECT_EQ(e.verdict, Verdict::Correct);
    EXPECT_TRUE(kl::test::hasRule(e, "worker.retried"));
    ASSERT_TRUE(waitUntil(
        [&]() {
            const int other = 1 - m.rowOf(victimId);
            return cell(m, other, WorkerTableModel::EvaluationsColumn) == QStringLiteral("1")
                && cell(m, other, WorkerTableModel::StateColumn) == QStringLiteral("idle");
        },
        5000))
        << "the other worker measured it and is free again";
    EXPECT_EQ(
        cell(m, 1 - m.rowOf(victimId), WorkerTableModel::WorkerColumn), QString::fromStdString(e.measuredOn.worker));
}

} // namespace

TEST(WorkersPanelPool, LocalChildren)
{
    const fs::path busy = kl::test::busyFile("gui-local");
    WorkerPool pool(kl::test::poolProblem(), parseWorkerSpecs("local:0,local:1"),
        kl::test::doubleOptions({ { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } }));
    panelFollowsThePoolThroughAKill(pool, busy, "local");
}

TEST(WorkersPanelPool, ThroughARealSshd)
{
    std::string why;
    auto sshd = kl::test::LoopbackSshd::start(&why);
    if (!sshd)
        GTEST_SKIP() << why;
    const fs::path busy = kl::test::busyFile("gui-ssh");
    const fs::path file = kl::test::writeWorkers(
        "gui-ssh", { kl::test::sshWorker(*sshd, 0, busy), kl::test::sshWorker(*sshd, 1, busy) });
    WorkerPool pool(kl::test::poolProblem(), parseWorkerSpecs(file.string()),
        kl::test::doubleOptions({ { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } }));
    panelFollowsThePoolThroughAKill(pool, busy, "ssh");
    fs::remove(file);
}

TEST(WorkersPanelPool, ThroughSrunInARealSlurm)
{
    std::string why;
    auto slurm = kl::test::LoopbackSlurm::start(&why);
    if (!slurm)
        GTEST_SKIP() << why;
    const fs::path busy = kl::test::busyFile("gui-slurm");
    const fs::path file = kl::test::writeWorkers("gui-slurm", kl::test::slurmWorkers(*slurm, 2, busy));
    WorkerPool pool(kl::test::poolProblem(), parseWorkerSpecs(file.string()),
        kl::test::doubleOptions({ { "KL_FAKE_WORKER_BUSY_FILE", busy.string() } }));
    panelFollowsThePoolThroughAKill(pool, busy, "slurm");
    fs::remove(file);
}

#ifdef KL_TEST_KLOOP_PATH
// The start page's worker specs reach `kloop run --workers` (the real kloop, the test double on two "GPUs", no local
// GPU needed), and the Workers panel of the workbench following that run shows the pool from the snapshot kloop run
// rewrites, with the evaluations each worker measured.
TEST(WorkersPanelPool, AStartPagePoolRunsKloopRunWithThoseWorkersAndThePanelShowsThem)
{
    QTemporaryDir tmp;
    const QString root = tmp.path();
    setLocalGpuProbe([]() { return false; });
    qputenv("KL_KLOOP", KL_TEST_KLOOP_PATH);
    qputenv("KL_WORKER", KL_FAKE_WORKER_PATH);
    qputenv("KL_SESSIONS_DIR", (root + QStringLiteral("/sessions")).toUtf8());
    qputenv("KL_GPU_LOCK_DIR", root.toUtf8());
    qputenv("KL_CACHE_DIR", (root + QStringLiteral("/cache")).toUtf8());
    qputenv("XDG_CACHE_HOME", (root + QStringLiteral("/cache")).toUtf8());
    qputenv("XDG_CONFIG_HOME", (root + QStringLiteral("/config")).toUtf8());
    qputenv("KL_CONTEXT_DIRS", "");
    {
        MainWindow w;
        w.show();
        QSignalSpy ready(&w, &MainWindow::sessionReady);
        QSignalSpy failed(&w, &MainWindow::localRunFailed);
        w.startPage()->setWorkerSpecs(QStringLiteral("local:0, local:1"));
        emit w.startPage()->newSessionRequested(QStringLiteral("rmsnorm"));
        ASSERT_TRUE(ready.wait(60000)) << (failed.isEmpty() ? w.startPage()->notice().toStdString()
                                                            : failed.front().front().toString().toStdString());
        const QStringList args = w.localRun()->arguments();
        const auto at = args.indexOf(QStringLiteral("--workers"));
        ASSERT_GE(at, 0) << args.join(QLatin1Char(' ')).toStdString();
        EXPECT_EQ(args.value(at + 1), QStringLiteral("local:0, local:1"));
        const WorkerTableModel& m = *w.workersPanel()->model();
        auto evaluated = [&]() {
            int n = 0;
            for (int r = 0; r < m.rowCount(); ++r)
                n += cell(m, r, WorkerTableModel::EvaluationsColumn).toInt();
            return n;
        };
        ASSERT_TRUE(waitUntil([&]() { return m.rowCount() == 2 && evaluated() >= 6; }, 60000))
            << w.workersPanel()->summary().toStdString();
        EXPECT_TRUE(w.workersPanel()->summary().contains(QStringLiteral("kloop run")))
            << w.workersPanel()->summary().toStdString();
        EXPECT_GE(m.rowOf(QStringLiteral("local:0")), 0);
        EXPECT_GE(m.rowOf(QStringLiteral("local:1")), 0);
        // Stopped the way the workbench steers a run (its inbox); the last snapshot stays.
        kl::InboxRequest stop;
        stop.kind = kl::InboxRequest::Kind::Stop;
        kl::postInboxRequest(w.localRun()->sessionDir().toStdString(), stop);
        ASSERT_TRUE(waitUntil([&]() { return w.controller()->runHasStopped(); }, 60000));
        const kl::Session onDisk = kl::SessionStore::load(w.localRun()->sessionDir().toStdString());
        std::set<std::string> measuredBy;
        for (const auto& [id, e] : onDisk.evaluations)
            if (!e.measuredOn.empty())
                measuredBy.insert(e.measuredOn.worker);
        EXPECT_TRUE(measuredBy.count("local:0") || measuredBy.count("local:1"));
        for (const auto& worker : measuredBy)
            EXPECT_TRUE(worker == "local:0" || worker == "local:1") << worker;
    }
    setLocalGpuProbe({});
    for (const char* name : { "KL_KLOOP", "KL_WORKER", "KL_SESSIONS_DIR", "KL_GPU_LOCK_DIR", "KL_CACHE_DIR",
             "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "KL_CONTEXT_DIRS" })
        qunsetenv(name);
    QSettings().remove(QStringLiteral("worker"));
}
#endif
