// "Tune this": the bottleneck panel of a recorded model trace lists the operations catalogue problems fit, and a
// link on one makes a session whose tuning shapes are the shapes the model ran it at.
#include "app/bottleneck_panel.h"
#include "app/main_window.h"
#include "app/session_controller.h"
#include "app/timeline_panel.h"
#include "core/json_io.h"
#include "core/session_store.h"

#include <QDir>
#include <QPlainTextEdit>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <gtest/gtest.h>

using namespace kl::app;

TEST(TuneFromTrace, BottleneckPanelLinksTunableOperationsAndMakesASessionFromTheTrace)
{
    MainWindow w;
    auto* panel = static_cast<BottleneckPanel*>(w.bottleneckPanel());
    QSignalSpy loaded(w.timelinePanel(), &TimelinePanel::traceLoaded);
    const QString trace = QStringLiteral(KL_SOURCE_DIR "/resources/traces/h200-llama-decode.pt.trace.json.gz");
    QString error;
    EXPECT_TRUE(w.tuneFromTrace(QStringLiteral("rmsnorm"), {}, &error).isEmpty());
    EXPECT_TRUE(error.contains(QStringLiteral("Open a trace first"))) << qPrintable(error);

    w.timelinePanel()->loadTrace(trace);
    ASSERT_TRUE(loaded.count() > 0 || loaded.wait(60000));
    for (int i = 0; i < 600 && !panel->html().contains(QStringLiteral("Tunable operations")); ++i)
        QTest::qWait(100);
    const QString html = panel->html();
    ASSERT_TRUE(html.contains(QStringLiteral("Tunable operations"))) << qPrintable(html.left(2000));
    for (const char* problem : { "rmsnorm", "silu_and_mul", "gemm_bf16", "decode_attention" })
        EXPECT_TRUE(html.contains(QStringLiteral("tune:%1").arg(QLatin1String(problem)))) << problem;
    EXPECT_TRUE(html.contains(QStringLiteral("launch-bound")));
    EXPECT_TRUE(panel->summary().contains(QStringLiteral("Tunable operations")));

    QTemporaryDir root;
    ASSERT_TRUE(root.isValid());
    const QString dir = w.tuneFromTrace(QStringLiteral("rmsnorm"), root.path(), &error);
    ASSERT_FALSE(dir.isEmpty()) << qPrintable(error);
    const kl::Problem problem = kl::loadProblem(QDir(dir).filePath(QStringLiteral("problem")).toStdString());
    ASSERT_EQ(problem.tuningShapes.size(), 2u);
    EXPECT_EQ(problem.tuningShapes[0].dims.at("T"), 1); // the decode steps: most of rmsnorm's time
    EXPECT_GT(problem.tuningShapes[0].weight, problem.tuningShapes[1].weight);
    EXPECT_EQ(problem.tuningShapesFrom, trace.toStdString());
    const kl::Session s = kl::SessionStore::load(dir.toStdString());
    EXPECT_EQ(s.problemName, "rmsnorm");
    EXPECT_FALSE(s.tree.order().empty()); // baseline and template seeded

    // A problem the model does not run: the link's request is refused with the reason in the message log.
    panel->requestTune(QStringLiteral("softmax"));
    EXPECT_TRUE(
        w.messageLog()->toPlainText().contains(QStringLiteral("no operation of the trace fits problem softmax")))
        << qPrintable(w.messageLog()->toPlainText());
}

#ifdef KL_TEST_KLOOP_PATH
// With a session from the trace open (tuned by the real kloop run against the worker test double), the panel of the
// trace shows the projected saving of the session's best candidate.
TEST(TuneFromTrace, ThePanelProjectsTheOpenSessionsBestCandidateOntoTheTrace)
{
    QTemporaryDir tmp;
    ASSERT_TRUE(tmp.isValid());
    const QString trace = QStringLiteral(KL_SOURCE_DIR "/resources/traces/h200-llama-decode.pt.trace.json.gz");
    const QString dir = tmp.filePath(QStringLiteral("s"));
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("KL_WORKER"), QStringLiteral(KL_TEST_FAKE_WORKER_PATH));
    env.insert(QStringLiteral("XDG_CACHE_HOME"), tmp.filePath(QStringLiteral("cache")));
    env.remove(QStringLiteral("KL_PROBLEMS_DIR"));
    auto kloop = [&](const QStringList& args) {
        QProcess p;
        p.setProcessEnvironment(env);
        p.start(QStringLiteral(KL_TEST_KLOOP_PATH), args);
        EXPECT_TRUE(p.waitForFinished(120000));
        EXPECT_EQ(p.exitCode(), 0) << qPrintable(p.readAllStandardError());
    };
    kloop({ QStringLiteral("session"), QStringLiteral("new"), dir, QStringLiteral("--problem"),
        QStringLiteral("rmsnorm"), QStringLiteral("--from-trace"), trace });
    kloop({ QStringLiteral("run"), QStringLiteral("--resume"), dir, QStringLiteral("--agent"),
        QStringLiteral("tuner:random"), QStringLiteral("--budget"), QStringLiteral("6"),
        QStringLiteral("--no-tuning-db") });

    MainWindow w;
    QSignalSpy ready(&w, &MainWindow::sessionReady);
    w.openSession(dir, OpenMode::Replay, 1000.0);
    ASSERT_TRUE(ready.count() > 0 || ready.wait(60000));
    auto* panel = static_cast<BottleneckPanel*>(w.bottleneckPanel());
    QSignalSpy loaded(w.timelinePanel(), &TimelinePanel::traceLoaded);
    w.timelinePanel()->loadTrace(trace);
    ASSERT_TRUE(loaded.count() > 0 || loaded.wait(60000));
    for (int i = 0; i < 600 && !panel->html().contains(QStringLiteral("Projection for rmsnorm")); ++i)
        QTest::qWait(100);
    EXPECT_TRUE(panel->html().contains(QStringLiteral("Projection for rmsnorm (candidate c")))
        << qPrintable(panel->html().right(1500));
    EXPECT_TRUE(panel->summary().contains(QStringLiteral("of kernel time")));
}
#endif
