// The Workers panel without a pool: its model under QAbstractItemModelTester, the journal's measured_on counts, the
// snapshot kloop run writes (workers.status.json), and the start page's worker specs.
#include "app/models/worker_table_model.h"
#include "app/start_page.h"
#include "app/workers_panel.h"
#include "core/json_io.h"
#include "wait_until.h"

#include <QAbstractItemModelTester>
#include <QLabel>
#include <QLineEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <fstream>
#include <gtest/gtest.h>

using namespace kl::app;

namespace {

kl::PoolWorkerStatus worker(const std::string& id, const std::string& state, int evaluations = 0)
{
    kl::PoolWorkerStatus w;
    w.id = id;
    w.transport = id.rfind("ssh:", 0) == 0 ? "ssh" : "local";
    w.state = state;
    w.gpu = "NVIDIA H200";
    w.arch = "sm_90";
    w.host = "box";
    w.pid = 42;
    w.evaluations = evaluations;
    return w;
}

QString cell(const WorkerTableModel& m, int row, int column, int role = Qt::DisplayRole)
{
    return m.data(m.index(row, column), role).toString();
}

kl::Evaluation measured(const std::string& id, const std::string& worker, std::int64_t finishedMs, bool lost = false)
{
    kl::Evaluation e;
    e.candidateId = id;
    e.verdict = lost ? kl::Verdict::Crashed : kl::Verdict::Correct;
    e.finishedMs = finishedMs;
    e.measuredOn = { worker, "NVIDIA H200", "GPU-" + worker };
    if (lost)
        e.reasons.push_back({ "worker.lost", "time: the connection to " + worker + " dropped", 0, true });
    return e;
}

} // namespace

TEST(WorkerTableModel, RowsFollowSnapshotsUnderTheModelTester)
{
    WorkerTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    EXPECT_EQ(model.rowCount(), 0);
    model.setWorkers({ worker("local:0", "idle"), worker("ssh:box", "busy", 3) });
    ASSERT_EQ(model.rowCount(), 2);
    EXPECT_EQ(model.columnCount(), WorkerTableModel::ColumnCount);
    EXPECT_EQ(cell(model, 1, WorkerTableModel::WorkerColumn), QStringLiteral("ssh:box"));
    EXPECT_EQ(cell(model, 1, WorkerTableModel::EvaluationsColumn), QStringLiteral("3"));
    EXPECT_EQ(cell(model, 1, WorkerTableModel::GpuColumn), QStringLiteral("NVIDIA H200 (sm_90)"));
    EXPECT_EQ(cell(model, 1, WorkerTableModel::HostColumn), QStringLiteral("box (ssh, pid 42)"));
    EXPECT_EQ(cell(model, 0, WorkerTableModel::ClocksColumn), QString()) << "no clock before a measurement";

    // The same workers, one changed: that row changes in place, nothing is reset.
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    auto lost = worker("ssh:box", "lost", 3);
    lost.lost = 1;
    lost.reconnectInSeconds = 4;
    lost.lastError = "time: the connection to ssh:box dropped";
    lost.smClockMHz = 1980;
    lost.memClockMHz = 3201;
    model.setWorkers({ worker("local:0", "idle"), lost });
    EXPECT_EQ(reset.count(), 0);
    ASSERT_EQ(changed.count(), 1);
    EXPECT_EQ(changed.front().at(0).toModelIndex().row(), 1);
    EXPECT_EQ(cell(model, 1, WorkerTableModel::StateColumn), QStringLiteral("lost (reconnect in 4 s)"));
    EXPECT_EQ(cell(model, 1, WorkerTableModel::LostColumn), QStringLiteral("1"));
    EXPECT_EQ(cell(model, 1, WorkerTableModel::ErrorColumn), QString::fromStdString(lost.lastError));
    EXPECT_EQ(cell(model, 1, WorkerTableModel::StateColumn, Qt::ToolTipRole), QString::fromStdString(lost.lastError));
    EXPECT_EQ(cell(model, 1, WorkerTableModel::ClocksColumn), QStringLiteral("1980 / 3201 MHz"));
    EXPECT_TRUE(model.data(model.index(1, WorkerTableModel::StateColumn), Qt::ForegroundRole).isValid());
    EXPECT_EQ(model.rowOf(QStringLiteral("ssh:box")), 1);
    EXPECT_EQ(model.rowOf(QStringLiteral("nope")), -1);

    // An identical snapshot changes nothing; other workers reset the rows.
    model.setWorkers({ worker("local:0", "idle"), lost });
    EXPECT_EQ(changed.count(), 1);
    model.setWorkers({ worker("slurm:gpu#0", "starting") });
    EXPECT_EQ(reset.count(), 1);
    EXPECT_EQ(model.rowCount(), 1);
    model.setWorkers({});
    EXPECT_EQ(model.rowCount(), 0);
}

TEST(WorkersPanel, AFollowedSessionWithoutASnapshotShowsTheJournalsCountsPerWorker)
{
    QTemporaryDir tmp;
    auto s = std::make_shared<kl::Session>();
    s->evaluations["c1"] = measured("c1", "local:0", 10);
    s->evaluations["c2"] = measured("c2", "ssh:box", 20);
    s->evaluations["c3"] = measured("c3", "ssh:box", 30);
    s->evaluations["c4"] = measured("c4", "ssh:box", 40, true);
    s->evaluations["c5"].candidateId = "c5"; // compile failure: measured nowhere
    WorkersPanel panel;
    panel.followSession(tmp.path()); // kloop run without --workers writes no snapshot
    panel.setSession(s);
    QTest::qWait(WorkersPanel::kRefreshMs + 100);
    const auto* m = panel.model();
    ASSERT_EQ(m->rowCount(), 2);
    const int box = m->rowOf(QStringLiteral("ssh:box"));
    ASSERT_GE(box, 0);
    EXPECT_EQ(cell(*m, box, WorkerTableModel::EvaluationsColumn), QStringLiteral("2"));
    EXPECT_EQ(cell(*m, box, WorkerTableModel::LostColumn), QStringLiteral("1"));
    EXPECT_EQ(cell(*m, box, WorkerTableModel::StateColumn), QStringLiteral("recorded"));
    EXPECT_EQ(cell(*m, box, WorkerTableModel::ErrorColumn), QStringLiteral("time: the connection to ssh:box dropped"));
    EXPECT_EQ(cell(*m, m->rowOf(QStringLiteral("local:0")), WorkerTableModel::EvaluationsColumn), QStringLiteral("1"));
    EXPECT_TRUE(panel.summary().contains(QStringLiteral("measured_on"))) << panel.summary().toStdString();
    panel.clear();
    EXPECT_EQ(m->rowCount(), 0);
}

TEST(WorkersPanel, FollowsTheSnapshotKloopRunWritesAndNamesABadOne)
{
    QTemporaryDir tmp;
    const std::filesystem::path dir = tmp.path().toStdString();
    kl::PoolSnapshot pool;
    pool.workers = { worker("local:0", "busy", 5), worker("ssh:box", "unavailable") };
    pool.workers[0].candidate = "c0007";
    pool.workers[1].lastError = "ssh: connect to host box port 22: Connection refused";
    pool.waiting = 2;
    kl::writePoolStatus(dir, pool);
    ASSERT_EQ(kl::readPoolStatus(dir), pool) << "the snapshot's JSON form round-trips";

    WorkersPanel panel;
    auto s = std::make_shared<kl::Session>();
    s->evaluations["c1"] = measured("c1", "local:0", 10);
    panel.setSession(s);
    panel.followSession(tmp.path());
    const auto* m = panel.model();
    ASSERT_EQ(m->rowCount(), 2) << "the live snapshot wins over the journal's counts";
    EXPECT_EQ(cell(*m, 0, WorkerTableModel::InFlightColumn), QStringLiteral("c0007"));
    EXPECT_EQ(cell(*m, 1, WorkerTableModel::ErrorColumn), QString::fromStdString(pool.workers[1].lastError));
    EXPECT_TRUE(panel.summary().contains(QStringLiteral("2 waiting"))) << panel.summary().toStdString();

    // The run rewrites it: the panel follows within a refresh.
    pool.workers[0].state = "idle";
    pool.workers[0].candidate.clear();
    pool.workers[0].evaluations = 6;
    kl::writePoolStatus(dir, pool);
    ASSERT_TRUE(kl::test::waitUntil(
        [&]() { return cell(*m, 0, WorkerTableModel::EvaluationsColumn) == QStringLiteral("6"); }, 3000));

    // A torn or foreign file is said, naming it and the field; the journal's counts still show.
    std::ofstream(dir / kl::kPoolStatusFile) << R"({"workers": [{"id": "local:0"}]})";
    ASSERT_TRUE(kl::test::waitUntil([&]() { return panel.summary().contains(QStringLiteral("state")); }, 3000))
        << panel.summary().toStdString();
    EXPECT_TRUE(panel.summary().contains(QString::fromStdString(kl::kPoolStatusFile)));
    EXPECT_EQ(m->rowCount(), 1);
    EXPECT_EQ(cell(*m, 0, WorkerTableModel::StateColumn), QStringLiteral("recorded"));
}

TEST(StartPageWorkers, SpecsAreCheckedByThePoolsParserAndRemembered)
{
    {
        StartPage page;
        page.setWorkerSpecs(QStringLiteral("local,ssh:"));
        EXPECT_FALSE(page.workerSpecsError().isEmpty());
        EXPECT_TRUE(page.workerSpecsError().contains(QStringLiteral("'ssh:'")))
            << page.workerSpecsError().toStdString();
        auto* error = page.findChild<QLabel*>(QStringLiteral("workerSpecsError"));
        ASSERT_NE(error, nullptr);
        EXPECT_EQ(error->text(), page.workerSpecsError());
        page.setWorkerSpecs(QStringLiteral("local:0, ssh:gpu-box:1 ,slurm:gpu:2"));
        EXPECT_EQ(page.workerSpecsError(), QString());
        EXPECT_EQ(page.workerSpecs(), QStringLiteral("local:0, ssh:gpu-box:1 ,slurm:gpu:2"));
    }
    {
        StartPage again; // what the user typed last time
        EXPECT_EQ(again.workerSpecs(), QStringLiteral("local:0, ssh:gpu-box:1 ,slurm:gpu:2"));
        auto* edit = again.findChild<QLineEdit*>(QStringLiteral("workerSpecs"));
        ASSERT_NE(edit, nullptr);
        edit->setText(QStringLiteral("/nonexistent/workers.json"));
        EXPECT_TRUE(again.workerSpecsError().contains(QStringLiteral("/nonexistent/workers.json")))
            << again.workerSpecsError().toStdString();
        again.setWorkerSpecs(QString());
        EXPECT_EQ(again.workerSpecs(), QString()) << "empty: this machine's GPU";
        EXPECT_EQ(again.workerSpecsError(), QString());
    }
    QSettings().remove(QStringLiteral("worker"));
}
