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
#include <QTextBrowser>
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

    // Writes PNGs of widgets into the output folder, recording each file or the first failure.
    struct Writer {
        QDir out;
        ScreenshotResult& result;
        bool save(QWidget* widget, const QString& name)
        {
            const QString path = out.filePath(name);
            const QPixmap pm = widget->grab();
            if (pm.isNull() || !pm.save(path, "PNG")) {
                result.error = QStringLiteral("could not write %1").arg(path);
                return false;
            }
            result.files << path;
            return true;
        }
    };

    // Opens the session read-only and waits until every view has it; the error, or empty.
    QString openAndWait(MainWindow& window, const QString& session, int timeoutMs)
    {
        bool ready = false;
        bool failed = false;
        QString failure;
        auto c1 = QObject::connect(&window, &MainWindow::sessionReady, [&]() { ready = true; });
        auto c2 = QObject::connect(window.controller(), &SessionController::failed, [&](const QString& m) {
            failed = true;
            failure = m;
        });
        window.openSession(session, OpenMode::Load);
        waitFor([&]() { return ready || failed; }, timeoutMs);
        QObject::disconnect(c1);
        QObject::disconnect(c2);
        if (ready)
            return {};
        return failed ? failure : QStringLiteral("timed out opening %1").arg(session);
    }

    // Loads the traces into the timeline, each appended to the ones before, waiting for each.
    void loadAndWait(TimelinePanel* timeline, const QStringList& traces, int timeoutMs)
    {
        for (int i = 0; i < traces.size(); ++i) {
            bool loaded = false;
            auto c1 = QObject::connect(timeline, &TimelinePanel::tracesChanged, [&]() { loaded = true; });
            auto c2 = QObject::connect(timeline, &TimelinePanel::loadFailed, [&](const QString&) { loaded = true; });
            timeline->loadTrace(traces.at(i), i > 0);
            waitFor([&]() { return loaded; }, timeoutMs);
            QObject::disconnect(c1);
            QObject::disconnect(c2);
        }
    }

    QWidget* raiseDock(MainWindow& window, const char* name)
    {
        auto* dock = window.findChild<QDockWidget*>(QString::fromLatin1(name));
        if (!dock)
            return nullptr;
        dock->show();
        dock->raise();
        settle(120);
        return dock->widget();
    }

    // The candidate the engineer's hypothesis produced: the first one an LLM proposed under a hypothesis.
    std::optional<kl::CandidateId> hypothesisCandidate(const kl::Session& s)
    {
        for (const kl::CandidateId& id : s.tree.order()) {
            const kl::Candidate& c = s.tree.at(id);
            if (c.author == kl::Author::Llm && !c.hypothesisId.empty())
                return id;
        }
        return std::nullopt;
    }

    void renderMainViews(MainWindow& window, const ScreenshotOptions& options, const QString& session, Writer& w)
    {
        const QString trace = options.tracePath.isEmpty() ? findTrace(session) : options.tracePath;
        if (!trace.isEmpty())
            loadAndWait(window.timelinePanel(), { trace }, options.timeoutMs);

        // Show the best candidate's diff against its parent: the most telling default.
        if (const auto& s = window.controller()->session()) {
            if (const auto best = bestCandidate(*s))
                window.candidatePanel()->selectCandidate(QString::fromStdString(*best));
        }
        if (auto* charts = window.findChild<QDockWidget*>(QStringLiteral("chartsDock")))
            charts->raise();
        window.chartsPanel()->refreshNow();
        settle(300);
        if (!w.save(&window, QStringLiteral("02-workbench.png")))
            return;

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
        if (!w.save(window.diffView(), QStringLiteral("04-diff.png")))
            return;
        for (const View& v : views) {
            QWidget* widget = raiseDock(window, v.dock);
            if (!widget)
                continue;
            if (v.file == QLatin1String("05-charts.png"))
                window.chartsPanel()->refreshNow();
            if (!w.save(widget, QString::fromLatin1(v.file)))
                return;
        }
        if (!trace.isEmpty()) {
            raiseDock(window, "timelineDock");
            w.save(&window, QStringLiteral("10-workbench-timeline.png"));
        }
    }

    void renderMlaDemo(MainWindow& window, const ScreenshotOptions& options, const QString& session, Writer& w)
    {
        const auto& s = window.controller()->session();
        const auto candidate = s ? hypothesisCandidate(*s) : std::nullopt;
        if (!candidate) {
            w.result.error = QStringLiteral("%1 has no candidate proposed under a hypothesis (not the MLA "
                                            "hypothesis session?)")
                                 .arg(session);
            return;
        }
        const QStringList traces
            = options.tracePath.isEmpty() ? sessionTraces(session) : QStringList { options.tracePath };
        loadAndWait(window.timelinePanel(), traces, options.timeoutMs);
        // The hypothesis's candidate against its parent, the template: what the engineer reviews.
        window.candidatePanel()->selectCandidate(QString::fromStdString(*candidate));
        settle(300);
        QWidget* console = raiseDock(window, "hypothesisDock");
        if (!console)
            return;
        // The transcript from the engineer's hypothesis on (it ends with the run's last lines otherwise).
        const auto hypothesis = s->hypotheses.find(s->tree.at(*candidate).hypothesisId);
        if (auto* transcript = console->findChild<QTextBrowser*>(); transcript && hypothesis != s->hypotheses.end()) {
            transcript->moveCursor(QTextCursor::End);
            transcript->find(QString::fromStdString(hypothesis->second.text), QTextDocument::FindBackward);
            QTextCursor top = transcript->textCursor(); // the match is above the view's end: scrolls it to the top
            top.movePosition(QTextCursor::StartOfBlock); // the "hypothesis h1" header of its paragraph
            transcript->setTextCursor(top);
            transcript->ensureCursorVisible();
            settle(120);
        }
        if (!w.save(console, QStringLiteral("11-mla-hypothesis.png")))
            return;
        if (!w.save(window.diffView(), QStringLiteral("12-mla-diff.png")))
            return;
        if (QWidget* review = raiseDock(window, "reviewDock");
            !review || !w.save(review, QStringLiteral("13-mla-review.png")))
            return;
        // The referee's and the harness's verdicts on each candidate (with --auto-approve nothing waits in the
        // review queue): the template, the hypothesis's candidate, the tuner's configurations of it.
        if (QWidget* tree = raiseDock(window, "candidatesDock");
            !tree || !w.save(tree, QStringLiteral("16-mla-candidates.png")))
            return;
        if (traces.isEmpty()) {
            w.result.error = QStringLiteral("%1 has no traces/ for the timeline").arg(session);
            return;
        }
        if (QWidget* timeline = raiseDock(window, "timelineDock");
            !timeline || !w.save(timeline, QStringLiteral("14-mla-timeline.png")))
            return;
        w.save(&window, QStringLiteral("15-mla-workbench-timeline.png"));
    }

} // namespace

ScreenshotResult renderScreenshots(MainWindow& window, const ScreenshotOptions& options)
{
    ScreenshotResult result;
    QDir().mkpath(options.outputDir);
    Writer w { QDir(options.outputDir), result };
    const bool mla = options.set == ScreenshotSet::MlaDemo;

    window.resize(options.width, options.height);
    window.show();
    window.showStartPage();
    waitFor([&]() { return window.startPage()->catalogueLoaded(); }, options.timeoutMs);
    settle();
    if (!mla && !w.save(&window, QStringLiteral("01-start-page.png")))
        return result;

    const QString session
        = !options.sessionDir.isEmpty() ? options.sessionDir : (mla ? mlaDemoSessionDir() : demoSessionDir());
    if (session.isEmpty()) {
        result.error = mla ? QStringLiteral("no session given and this build has no bundled MLA session "
                                            "(resources/demo-session-mla/)")
                           : QStringLiteral("no session given and this build has no bundled session");
        return result;
    }
    if (const QString error = openAndWait(window, session, options.timeoutMs); !error.isEmpty()) {
        result.error = error;
        return result;
    }
    if (mla)
        renderMlaDemo(window, options, session, w);
    else
        renderMainViews(window, options, session, w);
    return result;
}

} // namespace kl::app
