#include "app/screenshot.h"

#include "app/candidate_panel.h"
#include "app/charts_panel.h"
#include "app/demo_session.h"
#include "app/diff_view.h"
#include "app/main_window.h"
#include "app/models/session_metrics.h"
#include "app/review_panel.h"
#include "app/session_controller.h"
#include "app/start_page.h"
#include "app/timeline_panel.h"

#include <QApplication>
#include <QDir>
#include <QDirIterator>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QPixmap>
#include <QTableView>
#include <QTimer>

namespace kl::app {

namespace {

    // Spins the event loop until done() or the deadline; returns done().
    template <typename Pred> bool waitFor(Pred done, int timeoutMs)
    {
        QElapsedTimer clock;
        clock.start();
        while (!done() && clock.elapsed() < timeoutMs)
            QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
        return done();
    }

    void settle(int ms = 150)
    {
        QElapsedTimer clock;
        clock.start();
        while (clock.elapsed() < ms)
            QCoreApplication::processEvents(QEventLoop::AllEvents, 10);
    }

    QString findTrace(const QString& sessionDir)
    {
        QDirIterator it(QDir(sessionDir).filePath(QStringLiteral("traces")),
            { QStringLiteral("*.json"), QStringLiteral("*.json.gz"), QStringLiteral("*.kltrace"),
                QStringLiteral("*.sqlite") },
            QDir::Files, QDirIterator::Subdirectories);
        QStringList found;
        while (it.hasNext())
            found << it.next();
        found.sort();
        return found.isEmpty() ? QString() : found.front();
    }

} // namespace

ScreenshotResult renderScreenshots(MainWindow& window, const ScreenshotOptions& options)
{
    ScreenshotResult result;
    QDir().mkpath(options.outputDir);
    const QDir out(options.outputDir);
    auto save = [&](QWidget* widget, const QString& name) {
        const QString path = out.filePath(name);
        const QPixmap pm = widget->grab();
        if (pm.isNull() || !pm.save(path, "PNG")) {
            result.error = QStringLiteral("could not write %1").arg(path);
            return false;
        }
        result.files << path;
        return true;
    };

    window.resize(options.width, options.height);
    window.show();
    window.showStartPage();
    waitFor([&]() { return window.startPage()->catalogueLoaded(); }, options.timeoutMs);
    settle();
    if (!save(&window, QStringLiteral("01-start-page.png")))
        return result;

    const QString session = options.sessionDir.isEmpty() ? demoSessionDir() : options.sessionDir;
    if (session.isEmpty()) {
        result.error = QStringLiteral("no session given and this build has no bundled session");
        return result;
    }
    bool ready = false;
    bool failed = false;
    QString failure;
    auto c1 = QObject::connect(&window, &MainWindow::sessionReady, [&]() { ready = true; });
    auto c2 = QObject::connect(window.controller(), &SessionController::failed, [&](const QString& m) {
        failed = true;
        failure = m;
    });
    window.openSession(session, OpenMode::Load);
    waitFor([&]() { return ready || failed; }, options.timeoutMs);
    QObject::disconnect(c1);
    QObject::disconnect(c2);
    if (!ready) {
        result.error = failed ? failure : QStringLiteral("timed out opening %1").arg(session);
        return result;
    }

    const QString trace = options.tracePath.isEmpty() ? findTrace(session) : options.tracePath;
    if (!trace.isEmpty()) {
        bool loaded = false;
        auto c3 = QObject::connect(window.timelinePanel(), &TimelinePanel::tracesChanged, [&]() { loaded = true; });
        auto c4 = QObject::connect(window.timelinePanel(), &TimelinePanel::loadFailed, [&](const QString& m) {
            failure = m;
            loaded = true;
        });
        window.timelinePanel()->loadTrace(trace);
        waitFor([&]() { return loaded; }, options.timeoutMs);
        QObject::disconnect(c3);
        QObject::disconnect(c4);
    }

    // Show the best candidate's diff against its parent: the most telling default.
    if (const auto& s = window.controller()->session()) {
        if (const auto best = bestCandidate(*s))
            window.candidatePanel()->selectCandidate(QString::fromStdString(*best));
    }
    if (auto* charts = window.findChild<QDockWidget*>(QStringLiteral("chartsDock")))
        charts->raise();
    window.chartsPanel()->refreshNow();
    settle(300);
    if (!save(&window, QStringLiteral("02-workbench.png")))
        return result;

    struct View {
        const char* dock;
        const char* file;
    };
    const View views[] = {
        { "candidatesDock", "03-candidates.png" },
        { "chartsDock", "05-charts.png" },
        { "reviewDock", "06-review.png" },
        { "hypothesisDock", "07-hypothesis.png" },
        { "timelineDock", "08-timeline.png" },
        { "bottleneckDock", "09-bottleneck.png" },
    };
    if (!save(window.diffView(), QStringLiteral("04-diff.png")))
        return result;
    for (const View& v : views) {
        auto* dock = window.findChild<QDockWidget*>(QString::fromLatin1(v.dock));
        if (!dock)
            continue;
        dock->show();
        dock->raise();
        settle(120);
        if (v.file == QLatin1String("05-charts.png"))
            window.chartsPanel()->refreshNow();
        if (!save(dock->widget(), QString::fromLatin1(v.file)))
            return result;
    }
    if (!trace.isEmpty()) {
        if (auto* dock = window.findChild<QDockWidget*>(QStringLiteral("timelineDock")))
            dock->raise();
        settle(120);
        if (!save(&window, QStringLiteral("10-workbench-timeline.png")))
            return result;
    }
    return result;
}

} // namespace kl::app
