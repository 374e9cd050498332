// What the workbench opens at launch, with an injected GPU probe and a fake kloop (a script that writes a
// session the way kloop run does: header first, journal lines as the run goes), so the GPU path runs in CI.
#include "app/demo_session.h"
#include "app/hypothesis_console.h"
#include "app/local_run.h"
#include "app/main_window.h"
#include "app/session_controller.h"
#include "app/start_page.h"
#include "app/startup.h"
#include "core/gpu_run_lock.h"
#include "session_fixture.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <gtest/gtest.h>

using namespace kl::app;

namespace {

template <typename Pred> bool waitUntil(Pred pred, int timeoutMs = 15000)
{
    QElapsedTimer clock;
    clock.start();
    while (!pred() && clock.elapsed() < timeoutMs)
        QTest::qWait(20);
    return pred();
}

// Writes its arguments to $KL_FAKE_KLOOP_ARGS, then either fails like kloop run without a usable GPU or
// creates the session: header and first journal lines at once, the rest of the journal a moment later.
constexpr const char* kFakeKloop = R"(#!/bin/sh
printf '%s\n' "$@" > "$KL_FAKE_KLOOP_ARGS"
dir=
while [ $# -gt 0 ]; do
  [ "$1" = --session ] && dir="$2"
  shift
done
# Finding the GPU takes a moment: the workbench must wait for a run that is alive but has no session yet.
sleep 0.6
if [ -n "$KL_FAKE_KLOOP_FAIL" ]; then
  echo "kloop run: no usable CUDA GPU: fake driver says no" >&2
  exit 1
fi
mkdir -p "$dir"
cp -r "$KL_FAKE_KLOOP_TEMPLATE/candidates" "$KL_FAKE_KLOOP_TEMPLATE/session.json" "$dir/"
head -n 4 "$KL_FAKE_KLOOP_TEMPLATE/journal.jsonl" > "$dir/journal.jsonl"
sleep 1
tail -n +5 "$KL_FAKE_KLOOP_TEMPLATE/journal.jsonl" >> "$dir/journal.jsonl"
)";

class Startup : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_TRUE(m_tmp.isValid());
        m_template = QDir(m_tmp.path()).filePath(QStringLiteral("template"));
        kl::test::writeSession(m_template.toStdString());
        m_kloop = QDir(m_tmp.path()).filePath(QStringLiteral("fake-kloop"));
        QFile f(m_kloop);
        ASSERT_TRUE(f.open(QIODevice::WriteOnly));
        f.write(kFakeKloop);
        f.close();
        f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
        m_argsFile = QDir(m_tmp.path()).filePath(QStringLiteral("kloop-args.txt"));
        qputenv("KL_KLOOP", m_kloop.toUtf8());
        qputenv("KL_FAKE_KLOOP_ARGS", m_argsFile.toUtf8());
        qputenv("KL_FAKE_KLOOP_TEMPLATE", m_template.toUtf8());
        qunsetenv("KL_FAKE_KLOOP_FAIL");
        // This test's own GPU lock, so a run on the machine (or a parallel test) never decides what it sees.
        qputenv("KL_GPU_LOCK_DIR", m_tmp.path().toUtf8());
    }
    void TearDown() override
    {
        setLocalGpuProbe({});
        qunsetenv("KL_KLOOP");
        qunsetenv("KL_FAKE_KLOOP_ARGS");
        qunsetenv("KL_FAKE_KLOOP_TEMPLATE");
        qunsetenv("KL_FAKE_KLOOP_FAIL");
        qunsetenv("KL_GPU_LOCK_DIR");
        for (const char* name : { "KL_WORKER", "KL_CACHE_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "KL_CONTEXT_DIRS" })
            qunsetenv(name);
    }
    StartupOptions options() const
    {
        StartupOptions o;
        o.run.sessionRoot = QDir(m_tmp.path()).filePath(QStringLiteral("sessions"));
        return o;
    }
    QStringList kloopArgs() const
    {
        QFile f(m_argsFile);
        if (!f.open(QIODevice::ReadOnly))
            return {};
        return QString::fromUtf8(f.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    }

    QTemporaryDir m_tmp;
    QString m_template;
    QString m_kloop;
    QString m_argsFile;
};

} // namespace

TEST_F(Startup, WithAGpuTheDefaultLaunchStartsARunAndFollowsIt)
{
    int probes = 0;
    setLocalGpuProbe([&probes]() {
        ++probes;
        return true;
    });
    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::sessionReady);
    const StartupOptions o = options();
    EXPECT_EQ(startWorkbench(w, o), StartupAction::StartedLocalRun);
    EXPECT_GT(probes, 0);
    const QString dir = w.localRun()->sessionDir();
    EXPECT_TRUE(dir.startsWith(o.run.sessionRoot + QStringLiteral("/rmsnorm-"))) << dir.toStdString();
    EXPECT_TRUE(w.startPage()->notice().contains(QStringLiteral("Starting kloop run")));

    ASSERT_TRUE(ready.wait(15000));
    // kloop run got the default problem and agent and the new session directory.
    EXPECT_EQ(kloopArgs(),
        (QStringList { QStringLiteral("run"), QStringLiteral("--problem"), QStringLiteral("rmsnorm"),
            QStringLiteral("--agent"), QStringLiteral("tuner:bayes"), QStringLiteral("--session"), dir }));
    EXPECT_EQ(w.controller()->info().directory, dir);
    EXPECT_TRUE(w.controller()->info().following);
    EXPECT_TRUE(w.statusText().contains(QStringLiteral("following"))) << w.statusText().toStdString();
    // The journal lines the run writes after the session opened arrive live.
    const std::size_t all = kl::SessionStore::load(m_template.toStdString()).tree.size();
    ASSERT_TRUE(waitUntil([&]() { return w.controller()->session() && w.controller()->session()->tree.size() == all; }))
        << (w.controller()->session() ? w.controller()->session()->tree.size() : 0) << " of " << all;
    EXPECT_TRUE(w.startPage()->notice().isEmpty());
}

TEST_F(Startup, WhenARunAlreadyHoldsTheGpuItsSessionIsFollowedAndNoSecondRunStarts)
{
    setLocalGpuProbe([]() { return true; });
    // Another kloop run holds the GPU: this test plays it (the lock is per open file, so the window's check from
    // this process sees it held).
    auto held = kl::GpuRunLock::tryAcquire(kl::localGpuKey(), m_template.toStdString(), nullptr);
    ASSERT_TRUE(held);
    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::sessionReady);
    EXPECT_EQ(startWorkbench(w, options()), StartupAction::FollowedRunningRun);
    ASSERT_TRUE(ready.wait(15000));
    EXPECT_EQ(w.controller()->info().directory, m_template);
    EXPECT_TRUE(w.controller()->info().following);
    QTest::qWait(800); // the fake kloop would have written its arguments by now
    EXPECT_TRUE(kloopArgs().isEmpty()) << "a second run was started on a busy GPU";
    // The start page's New session goes the same way.
    EXPECT_TRUE(w.startLocalRun(options().run));
    EXPECT_TRUE(kloopArgs().isEmpty());
}

TEST_F(Startup, ARunThatCannotStartSaysWhyOnTheStartPage)
{
    setLocalGpuProbe([]() { return true; });
    qputenv("KL_FAKE_KLOOP_FAIL", "1");
    MainWindow w;
    w.show();
    QSignalSpy failed(&w, &MainWindow::localRunFailed);
    EXPECT_EQ(startWorkbench(w, options()), StartupAction::StartedLocalRun);
    ASSERT_TRUE(failed.wait(15000));
    const QString message = failed.front().front().toString();
    EXPECT_TRUE(message.contains(QStringLiteral("no usable CUDA GPU: fake driver says no"))) << message.toStdString();
    EXPECT_EQ(w.startPage()->notice(), message);
    EXPECT_TRUE(w.startPage()->isVisible());
    EXPECT_FALSE(w.controller()->isOpen());

    // Without kloop at all, the start page says so at once.
    qputenv("KL_KLOOP", QDir(m_tmp.path()).filePath(QStringLiteral("no-such-kloop")).toUtf8());
    EXPECT_EQ(startWorkbench(w, options()), StartupAction::StartPage);
    EXPECT_TRUE(w.startPage()->notice().contains(QStringLiteral("kloop was not found")));
}

TEST_F(Startup, NoAutostartShowsTheStartPageAndStartsNothing)
{
    setLocalGpuProbe([]() { return true; });
    MainWindow w;
    w.show();
    StartupOptions o = options();
    o.autostart = false;
    EXPECT_EQ(startWorkbench(w, o), StartupAction::StartPage);
    EXPECT_TRUE(w.startPage()->isVisible());
    EXPECT_FALSE(w.localRun()->isWaiting());
    QTest::qWait(300);
    EXPECT_TRUE(kloopArgs().isEmpty());
}

TEST_F(Startup, WithoutAGpuTheBundledSessionIsReplayedAndNothingRuns)
{
    setLocalGpuProbe([]() { return false; });
    if (demoSessionDir().isEmpty())
        GTEST_SKIP() << "this build has no bundled session";
    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::sessionReady);
    StartupOptions o = options();
    o.speed = 0;
    EXPECT_EQ(startWorkbench(w, o), StartupAction::ReplayedDemo);
    ASSERT_TRUE(ready.wait(15000));
    EXPECT_TRUE(w.controller()->info().replaying);
    EXPECT_FALSE(w.localRun()->isWaiting());
    QTest::qWait(300);
    EXPECT_TRUE(kloopArgs().isEmpty());
}

// The whole launch path without a GPU: the real `kloop run` (tuner), with the worker's test double
// (tests/cli/fake_gpu_worker.cpp, KL_WORKER) standing in for kloop-worker on the GPU, started by the default
// launch and followed live until it finishes. Built where the CUDA toolkit is (kloop's evaluator needs NVRTC);
// KL_TEST_KLOOP and KL_TEST_FAKE_WORKER point at other builds' binaries.
TEST_F(Startup, WithAGpuTheRealKloopRunIsStartedAndFollowedUntilItFinishes)
{
    QString kloop = qEnvironmentVariable("KL_TEST_KLOOP");
    QString worker = qEnvironmentVariable("KL_TEST_FAKE_WORKER");
#ifdef KL_TEST_KLOOP_PATH
    if (kloop.isEmpty())
        kloop = QStringLiteral(KL_TEST_KLOOP_PATH);
    if (worker.isEmpty())
        worker = QStringLiteral(KL_TEST_FAKE_WORKER_PATH);
#endif
    if (kloop.isEmpty() || worker.isEmpty())
        GTEST_SKIP() << "needs kloop and kl_test_fake_worker (a build with the CUDA toolkit)";
    setLocalGpuProbe([]() { return true; });
    qputenv("KL_KLOOP", kloop.toUtf8());
    qputenv("KL_WORKER", worker.toUtf8());
    // Nothing from this machine's caches or tuning database reaches the run.
    qputenv("KL_CACHE_DIR", QDir(m_tmp.path()).filePath(QStringLiteral("cache")).toUtf8());
    qputenv("XDG_CACHE_HOME", QDir(m_tmp.path()).filePath(QStringLiteral("cache")).toUtf8());
    qputenv("XDG_CONFIG_HOME", QDir(m_tmp.path()).filePath(QStringLiteral("config")).toUtf8());
    qputenv("KL_CONTEXT_DIRS", "");
    StartupOptions o = options();
    o.run.extraArgs = { QStringLiteral("--budget"), QStringLiteral("12") };

    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::sessionReady);
    QSignalSpy failed(&w, &MainWindow::localRunFailed);
    ASSERT_EQ(startWorkbench(w, o), StartupAction::StartedLocalRun);
    ASSERT_TRUE(ready.wait(60000)) << (failed.isEmpty() ? std::string()
                                                        : failed.front().front().toString().toStdString());
    EXPECT_TRUE(w.controller()->info().following);
    // The run goes on after the session opened: the workbench shows it finishing, every evaluation included.
    ASSERT_TRUE(waitUntil(
        [&]() { return w.hypothesisConsole()->transcript().contains(QStringLiteral("session finished")); }, 60000))
        << w.hypothesisConsole()->transcript().toStdString();
    const QString dir = w.localRun()->sessionDir();
    const kl::Session onDisk = kl::SessionStore::load(dir.toStdString());
    ASSERT_TRUE(waitUntil([&]() {
        return w.controller()->session() && w.controller()->session()->evaluations.size() == onDisk.evaluations.size();
    }));
    EXPECT_GE(onDisk.evaluations.size(), 5u);
    EXPECT_EQ(w.controller()->session()->tree.size(), onDisk.tree.size());
    EXPECT_EQ(onDisk.settings.agent, "tuner:bayes");
    EXPECT_EQ(onDisk.problemName, "rmsnorm");
    EXPECT_EQ(onDisk.device.name, "test double (no GPU)");
    EXPECT_TRUE(w.statusText().contains(QStringLiteral("test double"))) << w.statusText().toStdString();
}
