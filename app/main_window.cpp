#include "app/main_window.h"

#include "app/bottleneck_panel.h"
#include "app/candidate_panel.h"
#include "app/charts_panel.h"
#include "app/demo_session.h"
#include "app/diff_view.h"
#include "app/hypothesis_console.h"
#include "app/models/candidate_tree_model.h"
#include "app/models/session_metrics.h"
#include "app/pipeline_panel.h"
#include "app/regimes_panel.h"
#include "app/review_panel.h"
#include "app/session_controller.h"
#include "app/start_page.h"
#include "app/status_field.h"
#include "app/theme.h"
#include "app/timeline_panel.h"
#include "app/workers_panel.h"
#include "core/catalogue.h"
#include "core/current_best.h"
#include "core/gpu_run_lock.h"
#include "kernels/export/exporter.h"
#include "profiler/analysis.h"
#include "profiler/workload_session.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTableView>
#include <QTime>
#include <QTimer>
#include <QTreeView>

namespace kl::app {

namespace {

    constexpr int kLayoutVersion = 1;

    QString traceSummary(const SelectionStats& s)
    {
        const double span = static_cast<double>(s.t1 - s.t0);
        if (span <= 0)
            return {};
        QString text = QStringLiteral("In the selected range (%1 from %2), the GPU is busy %3% of the time")
                           .arg(formatDurationNs(span), formatDurationNs(static_cast<double>(s.t0)))
                           .arg(100.0 * static_cast<double>(s.gpuBusyNs) / span, 0, 'f', 0);
        if (!s.topKernels.empty() && s.gpuBusyNs > 0) {
            const auto& [name, ns] = s.topKernels.front();
            text += QStringLiteral("; %1 takes %2% of that GPU time (%3)")
                        .arg(QString::fromStdString(name).left(80))
                        .arg(100.0 * static_cast<double>(ns) / static_cast<double>(s.gpuBusyNs), 0, 'f', 0)
                        .arg(formatDurationNs(static_cast<double>(ns)));
        }
        return text + QLatin1Char('.');
    }

    QString analysisHtml(const kl::prof::Analysis& a, const QString& label)
    {
        const Theme& t = theme();
        QString html
            = QStringLiteral("<p><span style='color:%1'>%2</span><br><b style='font-size:large'>%3</b></p>")
                  .arg(t.mutedText.name(), label.toHtmlEscaped(), QString::fromStdString(a.bottleneck).toHtmlEscaped());
        if (!a.findings.empty()) {
            html += QStringLiteral("<ul style='margin-left:-20px'>");
            for (const auto& f : a.findings)
                html += QStringLiteral("<li>%1</li>").arg(QString::fromStdString(f).toHtmlEscaped());
            html += QStringLiteral("</ul>");
        }
        if (!a.kernels.empty()) {
            html += QStringLiteral(
                "<table cellspacing=0 cellpadding=2><tr><th align=left>kernel</th><th align=right>share</th>"
                "<th align=right>median</th><th align=right>count</th><th align=left>bound</th></tr>");
            for (const auto& k : a.kernels) {
                html += QStringLiteral("<tr><td><tt>%1</tt></td><td align=right>%2%</td><td align=right>%3</td>"
                                       "<td align=right>%4</td><td>%5</td></tr>")
                            .arg(QString::fromStdString(k.name).left(48).toHtmlEscaped())
                            .arg(100.0 * k.share, 0, 'f', 1)
                            .arg(QString::fromStdString(kl::prof::formatNs(k.medianNs)))
                            .arg(k.count)
                            .arg(QString::fromStdString(k.roofline.bound));
            }
            html += QStringLiteral("</table>");
        }
        for (const auto& w : a.warnings)
            html += QStringLiteral("<p style='color:%1'>%2</p>")
                        .arg(t.warn.name(), QString::fromStdString(w).toHtmlEscaped());
        return html;
    }

    // The operations a catalogue problem fits, each with a "Tune this" link, and the phases classed by content.
    QString workloadHtml(const kl::prof::Workload& w)
    {
        const Theme& t = theme();
        QString html;
        if (!w.tunable.empty()) {
            html += QStringLiteral("<p><b>Tunable operations</b> (%1% of GPU time at shapes a problem fits)</p>"
                                   "<table cellspacing=0 cellpadding=2><tr><th align=left>problem</th>"
                                   "<th align=right>share</th><th align=right>calls</th><th align=left>shapes</th>"
                                   "<th></th></tr>")
                        .arg(w.gpuNs ? 100.0 * double(w.tunableNs) / double(w.gpuNs) : 0.0, 0, 'f', 1);
            for (const auto& op : w.tunable) {
                QStringList shapes;
                for (size_t i = 0; i < op.shapes.size() && i < 3; ++i)
                    shapes << QString::fromStdString(op.shapes[i].shape.label())
                            + (op.shapes[i].outside.empty() ? QString() : QStringLiteral(" (outside)"));
                const QString problem = QString::fromStdString(op.problem);
                html += QStringLiteral("<tr><td>%1</td><td align=right>%2%</td><td align=right>%3</td><td><tt>%4</tt>"
                                       "</td><td>%5</td></tr>")
                            .arg(problem.toHtmlEscaped())
                            .arg(100.0 * op.share, 0, 'f', 1)
                            .arg(op.calls)
                            .arg(shapes.join(QStringLiteral("; ")).toHtmlEscaped())
                            .arg(op.fittingNs > 0 ? QStringLiteral("<a href='tune:%1'>Tune this</a>").arg(problem)
                                                  : QStringLiteral("<span style='color:%1'>no shape fits</span>")
                                                        .arg(t.mutedText.name()));
            }
            html += QStringLiteral("</table>");
        }
        if (!w.phases.empty()) {
            html += QStringLiteral("<p><b>Phases</b></p><ul style='margin-left:-20px'>");
            for (const auto& ph : w.phases)
                html += QStringLiteral("<li>%1: <b>%2</b>, GPU busy %3%, %4. <i>%5</i></li>")
                            .arg(QString::fromStdString(ph.label).toHtmlEscaped(),
                                QString::fromStdString(ph.bound).toHtmlEscaped())
                            .arg(ph.busyPct, 0, 'f', 1)
                            .arg(QString::fromStdString(ph.dominant).toHtmlEscaped(),
                                QString::fromStdString(ph.target).toHtmlEscaped());
            html += QStringLiteral("</ul>");
        }
        for (const auto& n : w.notes)
            html += QStringLiteral("<p style='color:%1'>%2</p>")
                        .arg(t.mutedText.name(), QString::fromStdString(n).toHtmlEscaped());
        return html;
    }

} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
    , m_controller(new SessionController(this))
    , m_stack(new QStackedWidget(this))
    , m_start(new StartPage(this))
    , m_diff(new DiffView(this))
    , m_candidates(new CandidatePanel(this))
    , m_charts(new ChartsPanel(this))
    , m_review(new ReviewPanel(this))
    , m_console(new HypothesisConsole(this))
    , m_timeline(new TimelinePanel(this))
    , m_bottleneck(new BottleneckPanel(this))
    , m_workersPanel(new WorkersPanel(this))
    , m_pipelinePanel(new PipelinePanel(this))
    , m_regimes(new RegimesPanel(this))
    , m_workerLabel(new StatusField(60, this))
    , m_gpuLabel(new StatusField(48, this))
    , m_bestLabel(new StatusField(24, this))
    , m_statusTimer(new QTimer(this))
    , m_budget(new StatusField(0, this))
    , m_messages(new QPlainTextEdit(this))
    , m_launcher(new LocalRunLauncher(this))
{
    setObjectName(QStringLiteral("mainWindow"));
    setWindowTitle(tr("KernelLoop"));
    setDockNestingEnabled(true);
    m_stack->addWidget(m_start);
    m_stack->addWidget(m_diff);
    setCentralWidget(m_stack);

    addDock(tr("Candidates"), QStringLiteral("candidatesDock"), m_candidates, Qt::LeftDockWidgetArea);
    auto* review = addDock(tr("Review queue"), QStringLiteral("reviewDock"), m_review, Qt::RightDockWidgetArea);
    auto* console = addDock(tr("Hypothesis"), QStringLiteral("hypothesisDock"), m_console, Qt::RightDockWidgetArea);
    auto* bottleneck
        = addDock(tr("Bottleneck"), QStringLiteral("bottleneckDock"), m_bottleneck, Qt::RightDockWidgetArea);
    auto* charts = addDock(tr("Charts"), QStringLiteral("chartsDock"), m_charts, Qt::BottomDockWidgetArea);
    auto* timeline = addDock(tr("Timeline"), QStringLiteral("timelineDock"), m_timeline, Qt::BottomDockWidgetArea);
    m_messages->setObjectName(QStringLiteral("messageLog"));
    m_messages->setReadOnly(true);
    m_messages->setPlaceholderText(tr("Errors and warnings appear here, in full."));
    auto* messages = addDock(tr("Messages"), QStringLiteral("messagesDock"), m_messages, Qt::BottomDockWidgetArea);
    auto* workers = addDock(tr("Workers"), QStringLiteral("workersDock"), m_workersPanel, Qt::BottomDockWidgetArea);
    auto* pipeline = addDock(tr("Pipeline"), QStringLiteral("pipelineDock"), m_pipelinePanel, Qt::BottomDockWidgetArea);
    auto* regimes = addDock(tr("Regimes"), QStringLiteral("regimesDock"), m_regimes, Qt::BottomDockWidgetArea);
    splitDockWidget(review, console, Qt::Vertical);
    tabifyDockWidget(console, bottleneck);
    tabifyDockWidget(charts, timeline);
    tabifyDockWidget(timeline, messages);
    tabifyDockWidget(messages, workers);
    tabifyDockWidget(workers, pipeline);
    tabifyDockWidget(workers, regimes);
    console->raise();
    charts->raise();
    resizeDocks({ findChild<QDockWidget*>(QStringLiteral("candidatesDock")), review }, { 560, 400 }, Qt::Horizontal);
    resizeDocks({ charts }, { 300 }, Qt::Vertical);

    m_budget->setObjectName(QStringLiteral("budgetField"));
    m_budget->hide();
    statusBar()->addWidget(m_workerLabel, 1);
    statusBar()->addPermanentWidget(m_bestLabel);
    statusBar()->addPermanentWidget(m_gpuLabel);
    statusBar()->addPermanentWidget(m_budget);
    m_workerLabel->setText(tr("No session open"));
    // The status bar is text for a human: a few updates a second are plenty, however fast events arrive.
    m_statusTimer->setSingleShot(true);
    m_statusTimer->setInterval(250);
    connect(m_statusTimer, &QTimer::timeout, this, &MainWindow::updateStatusBar);

    createActions();

    connect(m_controller, &SessionController::opened, this, &MainWindow::onOpened);
    connect(m_controller, &SessionController::sessionUpdated, this, &MainWindow::onSessionUpdated);
    connect(m_controller, &SessionController::closed, m_workersPanel, &WorkersPanel::clear);
    connect(m_controller, &SessionController::eventsArrived, m_console, &HypothesisConsole::appendEvents);
    connect(m_controller, &SessionController::agentStreamArrived, m_console, &HypothesisConsole::appendLiveStream);
    connect(m_controller, &SessionController::replayProgress, this, [this]() {
        if (!m_statusTimer->isActive())
            m_statusTimer->start();
    });
    connect(m_controller, &SessionController::replayFinished, this, [this]() {
        updateStatusBar();
        m_candidates->fitIdColumn();
        showMessage(tr("Replay finished"));
    });
    connect(m_controller, &SessionController::failed, this, [this](const QString& message) {
        if (!m_controller->isOpen()) {
            m_workerLabel->setText(message);
            showStartPage();
        }
        reportProblem(message);
    });

    connect(m_candidates, &CandidatePanel::currentCandidateChanged, this, &MainWindow::onCurrentCandidate);
    // The regime's winner, as a click on a chart point selects one.
    connect(m_regimes, &RegimesPanel::candidateActivated, m_candidates, &CandidatePanel::selectCandidate);
    connect(m_candidates, &CandidatePanel::compareRequested, this, &MainWindow::compare);
    connect(m_candidates, &CandidatePanel::branchRequested, this, [this](const QString& id) {
        if (!m_controller->isWritable()) {
            showMessage(tr("Read-only session: open the session directory to branch from %1").arg(id));
            return;
        }
        m_controller->branchFrom(id);
        showMessage(tr("The next proposals branch from %1").arg(id));
    });
    connect(m_candidates, &CandidatePanel::exportRequested, this, &MainWindow::exportDialog);
    connect(m_review, &ReviewPanel::candidateActivated, m_candidates, &CandidatePanel::selectCandidate);
    connect(m_charts, &ChartsPanel::candidateClicked, m_candidates, &CandidatePanel::selectCandidate);
    connect(m_review, &ReviewPanel::decided, this, [this](const QString& id, bool approved, const QString& reason) {
        m_controller->recordReview(id, approved, reason);
        showMessage(approved ? tr("Approved %1").arg(id) : tr("Rejected %1: %2").arg(id, reason));
    });
    connect(
        m_console, &HypothesisConsole::hypothesisSubmitted, this, [this](const QString& text, const QString& agent) {
            m_controller->addHypothesis(text);
            showMessage(tr("Hypothesis recorded for %1").arg(agent));
        });
    auto* bottleneckPanel = static_cast<BottleneckPanel*>(m_bottleneck);
    connect(bottleneckPanel, &BottleneckPanel::useAsHypothesis, this, [this](const QString& summary) {
        m_console->setHypothesisText(summary);
        if (auto* dock = findChild<QDockWidget*>(QStringLiteral("hypothesisDock"))) {
            dock->show();
            dock->raise();
        }
    });
    connect(bottleneckPanel, &BottleneckPanel::tuneRequested, this, [this](const QString& problem) {
        QString error;
        if (tuneFromTrace(problem, {}, &error).isEmpty())
            reportProblem(error);
    });
    connect(m_timeline, &TimelinePanel::openTraceRequested, this, [this](bool append) {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Open trace"), QString(), tr("Traces (*.json *.json.gz *.sqlite *.kltrace);;All files (*)"));
        if (!path.isEmpty())
            m_timeline->loadTrace(path, append);
    });
    connect(m_timeline, &TimelinePanel::loadFailed, this, [this](const QString& m) { reportProblem(m); });
    connect(m_timeline, &TimelinePanel::traceLoaded, this, [this](const QString& label) {
        showMessage(tr("Loaded trace %1").arg(label));
        if (auto* dock = findChild<QDockWidget*>(QStringLiteral("timelineDock"))) {
            dock->show();
            dock->raise();
        }
    });
    connect(m_timeline, &TimelinePanel::tracesChanged, this, [this, bottleneckPanel]() {
        const auto traces = m_timeline->rowModel()->traces();
        if (traces.empty())
            return;
        // The last trace loaded is the one being studied (the candidate under a baseline).
        const TimelineTrace subject = traces.back();
        using Reading = std::pair<kl::prof::Analysis, std::shared_ptr<const kl::prof::Workload>>;
        m_traceAnalysis.start(
            [subject]() {
                return Reading { kl::prof::analyze(*subject.trace),
                    std::make_shared<const kl::prof::Workload>(
                        kl::prof::analyzeWorkload(*subject.trace, kl::loadCatalogue())) };
            },
            [this, bottleneckPanel, subject](const Reading& r) {
                m_workload = r.second;
                // The open session's best candidate, projected onto the trace (Amdahl, per shape).
                std::string projection;
                if (const SessionSnapshot& s = m_controller->session(); s && r.second->tunableFor(s->problemName))
                    if (const auto best = kl::bestAcceptedId(*s))
                        projection = kl::prof::toText(
                            kl::prof::projectGain(*r.second, s->problemName, *best, s->evaluations.at(*best).shapes));
                bottleneckPanel->setAnalysis(analysisHtml(r.first, subject.label) + workloadHtml(*r.second)
                        + (projection.empty() ? QString()
                                              : QStringLiteral("<p><b>%1</b></p>")
                                                    .arg(QString::fromStdString(projection).toHtmlEscaped())),
                    QString::fromStdString(kl::prof::toText(r.first) + kl::prof::toText(*r.second) + projection));
            });
    });
    connect(m_timeline, &TimelinePanel::selectionChanged, this, [this, bottleneckPanel](const SelectionStats& s) {
        m_traceAnalysis.drop(); // the selection's statistics are newer than a whole-trace analysis still running
        bottleneckPanel->setAnalysis(
            selectionStatsHtml(s) + QStringLiteral("<p>%1</p>").arg(traceSummary(s)), traceSummary(s));
    });

    connect(m_start, &StartPage::openSessionRequested, this, [this]() { openSessionDialog(OpenMode::Writable); });
    connect(m_start, &StartPage::replaySessionRequested, this, [this]() { openSessionDialog(OpenMode::Replay); });
    connect(m_start, &StartPage::followSessionRequested, this, [this]() { openSessionDialog(OpenMode::Follow); });
    connect(m_start, &StartPage::openTraceRequested, this, &MainWindow::openTraceDialog);
    connect(m_start, &StartPage::openDemoRequested, this, [this](const QString& dir) { openBundledDemo(*this, dir); });
    connect(m_start, &StartPage::recentSessionActivated, this,
        [this](const QString& dir) { openSession(dir, OpenMode::Writable); });
    connect(m_start, &StartPage::newSessionRequested, this, &MainWindow::newSessionFromStartPage);
    connect(m_launcher, &LocalRunLauncher::sessionCreated, this, [this](const QString& dir) {
        m_start->setNotice(QString());
        openSession(dir, OpenMode::Follow);
    });
    connect(m_launcher, &LocalRunLauncher::failed, this, [this](const QString& message) {
        m_start->setNotice(message);
        showStartPage();
        showMessage(message, 15000);
        emit localRunFailed(message);
    });
    m_start->setRecentSessions(QSettings().value(QStringLiteral("recentSessions")).toStringList());
    m_start->setDemos(bundledDemos());

    m_defaultState = saveState(kLayoutVersion);
    m_workbenchState = m_defaultState;
    for (QDockWidget* dock : docks())
        dock->hide();
    resize(1440, 900);
}

MainWindow::~MainWindow() = default;

QDockWidget* MainWindow::addDock(
    const QString& title, const QString& objectName, QWidget* widget, Qt::DockWidgetArea area)
{
    auto* dock = new QDockWidget(title, this);
    dock->setObjectName(objectName);
    dock->setWidget(widget);
    dock->setFeatures(
        QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetClosable | QDockWidget::DockWidgetFloatable);
    addDockWidget(area, dock);
    return dock;
}

QList<QDockWidget*> MainWindow::docks() const
{
    return findChildren<QDockWidget*>();
}

void MainWindow::createActions()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(
        tr("&Open Session…"), QKeySequence::Open, this, [this]() { openSessionDialog(OpenMode::Writable); });
    file->addAction(tr("&Replay Session…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O), this,
        [this]() { openSessionDialog(OpenMode::Replay); });
    file->addAction(tr("Replay &Bundled H200 Session"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_D), this, [this]() {
        const QString demo = demoSessionDir();
        if (!demo.isEmpty())
            openSession(demo, OpenMode::Replay, 4.0);
        else
            showMessage(tr("This build has no bundled session"));
    });
    file->addAction(tr("&Follow Running Session…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_F), this,
        [this]() { openSessionDialog(OpenMode::Follow); });
    file->addAction(tr("Open &Trace…"), QKeySequence(Qt::CTRL | Qt::Key_T), this, &MainWindow::openTraceDialog);
    // A result of kloop pipeline run --out (the worker's pipeline reply).
    file->addAction(tr("Open &Pipeline Result…"), this, [this]() {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Open pipeline result"), QString(), tr("Pipeline results (*.json);;All files (*)"));
        if (path.isEmpty())
            return;
        if (!m_pipelinePanel->loadFile(path))
            showMessage(m_pipelinePanel->error());
        if (auto* dock = findChild<QDockWidget*>(QStringLiteral("pipelineDock"))) {
            dock->show();
            dock->raise();
        }
    });
    file->addSeparator();
    file->addAction(tr("&Export Selected Candidate…"), QKeySequence(Qt::CTRL | Qt::Key_E), this, [this]() {
        QString id = m_candidates->currentCandidate();
        if (id.isEmpty() && m_controller->session()) {
            const auto best = bestCandidate(*m_controller->session());
            if (best)
                id = QString::fromStdString(*best);
        }
        exportDialog(id);
    });
    file->addSeparator();
    file->addAction(
        tr("&Start Page"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S), this, &MainWindow::showStartPage);
    file->addAction(tr("&Close Session"), QKeySequence::Close, this, [this]() {
        m_controller->close();
        showStartPage();
    });
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    QMenu* candidate = menuBar()->addMenu(tr("&Candidate"));
    candidate->addAction(tr("Diff Against &Parent"), QKeySequence(Qt::CTRL | Qt::Key_P), this,
        [this]() { onCurrentCandidate(m_candidates->currentCandidate()); });
    candidate->addAction(tr("&Compare Two Selected"), QKeySequence(Qt::CTRL | Qt::Key_D), this, [this]() {
        const QStringList ids = m_candidates->selectedCandidates();
        if (ids.size() == 2)
            compare(ids[0], ids[1]);
        else
            showMessage(tr("Select exactly two candidates (Ctrl+click) to compare them"));
    });
    candidate->addAction(tr("&Branch From Selected"), QKeySequence(Qt::CTRL | Qt::Key_B), this, [this]() {
        const QString id = m_candidates->currentCandidate();
        if (!id.isEmpty())
            emit m_candidates->branchRequested(id);
    });
    candidate->addAction(tr("Go to &Best"), QKeySequence(Qt::CTRL | Qt::Key_G), this, [this]() {
        if (!m_controller->session())
            return;
        const auto best = bestCandidate(*m_controller->session());
        if (best)
            m_candidates->selectCandidate(QString::fromStdString(*best));
    });
    candidate->addSeparator();
    candidate->addAction(tr("&Next Change"), QKeySequence(Qt::Key_F7), m_diff, &DiffView::nextChange);
    candidate->addAction(
        tr("P&revious Change"), QKeySequence(Qt::SHIFT | Qt::Key_F7), m_diff, &DiffView::previousChange);
    candidate->addSeparator();
    candidate->addAction(tr("&Approve Review Item"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_A), m_review,
        &ReviewPanel::approveCurrent);
    candidate->addAction(tr("Re&ject Review Item"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R), m_review,
        &ReviewPanel::rejectCurrent);
    candidate->addAction(tr("Write &Hypothesis"), QKeySequence(Qt::CTRL | Qt::Key_H), this, [this]() {
        if (auto* dock = findChild<QDockWidget*>(QStringLiteral("hypothesisDock"))) {
            dock->show();
            dock->raise();
        }
        m_console->editor()->setFocus();
    });
    candidate->addAction(
        tr("Bottleneck Summary → Hypothesis"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_H), this, [this]() {
            auto* panel = static_cast<BottleneckPanel*>(m_bottleneck);
            if (!panel->summary().isEmpty())
                emit panel->useAsHypothesis(panel->summary());
        });

    QMenu* replay = menuBar()->addMenu(tr("&Replay"));
    auto* pause = replay->addAction(tr("&Pause"), QKeySequence(Qt::Key_F8), this, [this]() {
        m_controller->setPaused(!m_controller->isPaused());
        updateStatusBar();
    });
    pause->setCheckable(false);
    auto* speeds = new QActionGroup(this);
    for (const auto& [label, speed, key] :
        { std::tuple { tr("Real Time (1×)"), 1.0, Qt::Key_1 }, std::tuple { tr("4×"), 4.0, Qt::Key_2 },
            std::tuple { tr("16×"), 16.0, Qt::Key_3 }, std::tuple { tr("As Fast as Possible"), 0.0, Qt::Key_4 } }) {
        auto* a = replay->addAction(label, QKeySequence(Qt::CTRL | Qt::ALT | key), this, [this, s = speed]() {
            m_speed = s;
            m_controller->setSpeed(s);
            updateStatusBar();
        });
        a->setCheckable(true);
        speeds->addAction(a);
    }

    QMenu* view = menuBar()->addMenu(tr("&View"));
    for (QDockWidget* dock : docks())
        view->addAction(dock->toggleViewAction());
    view->addSeparator();
    view->addAction(tr("&Reset Layout"), this, [this]() {
        showWorkbench();
        restoreState(m_defaultState, kLayoutVersion);
    });

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&Keyboard Shortcuts"), QKeySequence::HelpContents, this, [this]() {
        QMessageBox::information(this, tr("Keyboard shortcuts"),
            tr("Ctrl+O open session · Ctrl+Shift+O replay · Ctrl+T open trace · Ctrl+E export\n"
               "Ctrl+P diff vs parent · Ctrl+D compare two · Ctrl+B branch · Ctrl+G best\n"
               "F7 / Shift+F7 next / previous change · Ctrl+Shift+A approve · Ctrl+Shift+R reject\n"
               "Ctrl+H hypothesis · Ctrl+Return send · Ctrl+Shift+H bottleneck → hypothesis\n"
               "F8 pause replay · Ctrl+Alt+1..4 replay speed\n"
               "Timeline: wheel zoom · drag pan · Shift+drag select · double-click fit · +/- · arrows"));
    });
}

void MainWindow::openSession(const QString& directory, OpenMode requested, double speed)
{
    const bool demo = requested == OpenMode::Writable && isBundledDemoSession(directory);
    const OpenMode mode = demo ? OpenMode::Load : requested;
    m_sessionReadyEmitted = false;
    m_diffShownFor.clear();
    m_speed = speed;
    m_console->clearTranscript();
    m_diff->clear(tr("Loading %1…").arg(QDir::toNativeSeparators(directory)));
    m_workerLabel->setText(tr("Opening %1…").arg(QDir::toNativeSeparators(directory)));
    // An empty snapshot first, so the previous session's rows never mix with this one's.
    m_candidates->setSession(nullptr);
    m_review->setSession(nullptr);
    m_charts->setSession(nullptr);
    m_regimes->setSession(nullptr);
    m_workersPanel->clear();
    m_controller->open(directory, mode, speed);
    if (demo)
        showMessage(tr("The bundled demo session opens read-only; copy its folder to record decisions in it"), 15000);
}

void MainWindow::showStartPage()
{
    m_start->setRecentSessions(QSettings().value(QStringLiteral("recentSessions")).toStringList());
    if (m_stack->currentWidget() != m_start) {
        // The start page gets the whole window; the docks come back as they were.
        m_workbenchState = saveState(kLayoutVersion);
        for (QDockWidget* dock : docks())
            dock->hide();
    }
    m_stack->setCurrentWidget(m_start);
}

void MainWindow::showWorkbench()
{
    if (m_stack->currentWidget() == m_start) {
        const bool fresh = m_workbenchState.isEmpty() || m_workbenchState == m_defaultState;
        restoreState(fresh ? m_defaultState : m_workbenchState, kLayoutVersion);
        if (fresh) {
            // Proportions only make sense once the window has its size.
            resizeDocks({ findChild<QDockWidget*>(QStringLiteral("candidatesDock")),
                            findChild<QDockWidget*>(QStringLiteral("reviewDock")) },
                { width() * 30 / 100, width() * 24 / 100 }, Qt::Horizontal);
            resizeDocks(
                { findChild<QDockWidget*>(QStringLiteral("chartsDock")) }, { height() * 34 / 100 }, Qt::Vertical);
        }
    }
    m_stack->setCurrentWidget(m_diff);
}

void MainWindow::onOpened(const OpenedSession& info)
{
    showWorkbench();
    setWindowTitle(tr("%1 — KernelLoop").arg(info.displayName));
    m_review->setWritable(info.writable);
    m_console->setWritable(info.writable);
    m_charts->setProblem(info.problem);
    m_regimes->setProblem(info.problem);
    if (!info.replaying)
        addRecent(info.directory);
    m_runStopShown = false;
    if (info.following)
        m_workersPanel->followSession(info.directory); // kloop run --workers rewrites the pool's snapshot there
    for (const QString& w : info.warnings)
        reportProblem(w);
    updateStatusBar();
}

void MainWindow::onSessionUpdated(const SessionSnapshot& s)
{
    m_candidates->setSession(s);
    m_review->setSession(s);
    m_charts->setSession(s);
    m_regimes->setSession(s);
    m_workersPanel->setSession(s);
    if (!s)
        return;
    QString current = m_candidates->currentCandidate();
    if (current.isEmpty() && !s->tree.empty()) {
        const auto best = bestCandidate(*s);
        m_candidates->selectCandidate(QString::fromStdString(best ? *best : s->tree.order().front()));
    } else if (current == m_diffShownFor && s->tree.contains(current.toStdString())) {
        // Same candidate, but a parent may have arrived or the candidate may be re-shown after a load.
        const auto& c = s->tree.at(current.toStdString());
        if (c.sourceHash != m_diffSourceHash)
            onCurrentCandidate(current);
    }
    showLoopProfile();
    applyRunState();
    if (!m_sessionReadyEmitted || !m_controller->isReplaying())
        updateStatusBar();
    else if (!m_statusTimer->isActive())
        m_statusTimer->start();
    if (!m_sessionReadyEmitted) {
        m_sessionReadyEmitted = true;
        emit sessionReady();
    }
}

void MainWindow::showLoopProfile()
{
    // A trace the engineer opened is what the panel is about; until then it shows the loop's profile of the
    // selected candidate, else of the best: the text the agent's prompt carried.
    const SessionSnapshot& s = m_controller->session();
    if (!s || !m_timeline->rowModel()->traces().empty())
        return;
    auto it = s->profiles.find(m_candidates->currentCandidate().toStdString());
    if (it == s->profiles.end())
        if (const auto best = bestCandidate(*s))
            it = s->profiles.find(*best);
    if (it == s->profiles.end())
        return;
    const QString text = QString::fromStdString(kl::bottleneckSummary(it->second));
    auto* panel = static_cast<BottleneckPanel*>(m_bottleneck);
    if (panel->summary() == text)
        return;
    const Theme& t = theme();
    panel->setAnalysis(
        QStringLiteral("<p><span style='color:%1'>%2</span></p><pre style='white-space:pre-wrap'>%3</pre>")
            .arg(t.mutedText.name(),
                tr("Profile of %1 by the research loop (in the agent's prompt)")
                    .arg(QString::fromStdString(it->first))
                    .toHtmlEscaped(),
                text.toHtmlEscaped()),
        text);
}

void MainWindow::onCurrentCandidate(const QString& id)
{
    const SessionSnapshot& s = m_controller->session();
    m_charts->setSelectedCandidate(id);
    showLoopProfile();
    if (!s || id.isEmpty() || !s->tree.contains(id.toStdString()))
        return;
    const kl::Candidate& c = s->tree.at(id.toStdString());
    m_diffShownFor = id;
    m_diffSourceHash = c.sourceHash;
    if (c.parentId.empty() || !s->tree.contains(c.parentId)) {
        m_diff->setTexts(tr("(no parent: %1 is a root)").arg(id), std::string(), id, c.source);
        return;
    }
    const kl::Candidate& parent = s->tree.at(c.parentId);
    m_diff->setTexts(tr("%1 (parent)").arg(QString::fromStdString(parent.id)), parent.source,
        QStringLiteral("%1 — %2").arg(id, stateText(c)), c.source);
    m_diff->setParameterChanges(kl::paramDiff(parent.params, c.params));
}

void MainWindow::compare(const QString& oldId, const QString& newId)
{
    const SessionSnapshot& s = m_controller->session();
    if (!s || !s->tree.contains(oldId.toStdString()) || !s->tree.contains(newId.toStdString()))
        return;
    m_diffShownFor.clear();
    const kl::Candidate& oldC = s->tree.at(oldId.toStdString());
    const kl::Candidate& newC = s->tree.at(newId.toStdString());
    m_diff->setTexts(oldId, oldC.source, newId, newC.source);
    m_diff->setParameterChanges(kl::paramDiff(oldC.params, newC.params));
    showWorkbench();
}

bool MainWindow::exportTo(const QString& candidateId, const QString& directory, QString* error, bool force)
{
    auto fail = [error](const QString& message) {
        if (error)
            *error = message;
        return false;
    };
    const SessionSnapshot& s = m_controller->session();
    if (!s)
        return fail(tr("No session open"));
    const std::optional<kl::Problem>& problem = m_controller->info().problem;
    if (!problem)
        return fail(tr("The problem '%1' of this session was not found in the catalogue, so its reference kernel "
                       "(the fallback of the bundle) is not available: nothing was exported")
                        .arg(QString::fromStdString(s->problemName)));
    kl::exporter::ExportOptions options;
    options.candidateId = candidateId.toStdString();
    options.outDir = directory.toStdString();
    options.force = force;
    try {
        kl::exporter::exportBundle(*s, *problem, options);
    } catch (const std::exception& e) {
        return fail(QString::fromStdString(e.what()));
    }
    if (error)
        error->clear();
    return true;
}

void MainWindow::exportWithReview(const QString& candidateId, const QString& directory)
{
    const SessionSnapshot& s = m_controller->session();
    const std::optional<kl::Problem>& problem = m_controller->info().problem;
    bool force = false;
    if (s && problem) {
        kl::exporter::ExportPlan plan;
        try {
            plan = kl::exporter::planExport(*s, *problem, candidateId.toStdString());
        } catch (const std::exception& e) {
            QMessageBox::warning(this, tr("Export failed"), QString::fromStdString(e.what()));
            return;
        }
        if (!plan.refusals.empty()) {
            QString reasons;
            QStringList codes;
            for (const auto& r : plan.refusals) {
                reasons += QStringLiteral("<li><b>%1</b>: %2</li>")
                               .arg(QString::fromStdString(r.code).toHtmlEscaped(),
                                   QString::fromStdString(r.message).toHtmlEscaped());
                codes << QString::fromStdString(r.code);
            }
            codes.removeDuplicates();
            QMessageBox refused(QMessageBox::Warning, tr("Export refused"),
                tr("<p>%1 is not exported, for these reasons:</p><ul>%2</ul>").arg(candidateId, reasons),
                QMessageBox::Close, this);
            refused.setObjectName(QStringLiteral("exportRefusedDialog"));
            QPushButton* forceButton = refused.addButton(tr("Force Export…"), QMessageBox::DestructiveRole);
            forceButton->setObjectName(QStringLiteral("forceExport"));
            refused.setDefaultButton(QMessageBox::Close);
            refused.exec();
            if (refused.clickedButton() != forceButton)
                return;
            QMessageBox confirm(QMessageBox::Warning, tr("Force the export?"),
                tr("Export %1 despite: %2?\n\nThis is kloop export --force: the bundle's manifest.json and "
                   "headers will name these reasons, and whoever uses the kernel must check it.")
                    .arg(candidateId, codes.join(QStringLiteral(", "))),
                QMessageBox::Cancel, this);
            confirm.setObjectName(QStringLiteral("exportForceConfirmation"));
            QPushButton* yes = confirm.addButton(tr("Export Anyway"), QMessageBox::DestructiveRole);
            confirm.setDefaultButton(QMessageBox::Cancel);
            confirm.exec();
            if (confirm.clickedButton() != yes)
                return;
            force = true;
        }
    }
    QString error;
    if (exportTo(candidateId, directory, &error, force))
        showMessage(tr("Exported %1%2 to %3")
                        .arg(candidateId, force ? tr(" (forced)") : QString(), QDir::toNativeSeparators(directory)));
    else
        QMessageBox::warning(this, tr("Export failed"), error);
}

void MainWindow::exportDialog(const QString& id)
{
    if (id.isEmpty()) {
        showMessage(tr("Select a candidate to export"));
        return;
    }
    // Next to the session rather than in the process's working directory (often a source tree).
    const QString start
        = m_controller->isOpen() ? QFileInfo(m_controller->info().directory).absolutePath() : QDir::homePath();
    const QString dir
        = QFileDialog::getExistingDirectory(this, tr("Export %1 into (a folder %1 is created there)").arg(id), start);
    if (dir.isEmpty())
        return;
    exportWithReview(id, QDir(dir).filePath(id));
}

void MainWindow::updateStatusBar()
{
    const SessionSnapshot& s = m_controller->session();
    const OpenedSession& info = m_controller->info();
    QString worker;
    if (!m_controller->isOpen()) {
        worker = tr("No session open");
    } else if (m_controller->isReplaying()) {
        const QString speed = m_speed <= 0 ? tr("max speed") : QStringLiteral("%1×").arg(m_speed);
        worker = tr("Replaying %1: event %2 of %3 · %4%5")
                     .arg(info.displayName)
                     .arg(m_controller->eventsApplied())
                     .arg(info.eventCount)
                     .arg(speed, m_controller->isPaused() ? tr(" · paused (F8)") : QString());
    } else if (info.following && m_controller->runHasStopped()) {
        worker = tr("%1 · was following: the run has %2 (%3); nothing reads decisions now: kloop run --resume %4")
                     .arg(info.displayName, m_controller->runState(), m_controller->runStateReason(),
                         QDir::toNativeSeparators(info.directory));
    } else if (info.following) {
        worker = tr("%1 · following the running session (kloop run writes it; read-only here)").arg(info.displayName);
    } else if (info.writable) {
        worker = tr("%1 · live (writable): decisions and hypotheses are recorded").arg(info.displayName);
    } else {
        worker = tr("%1 · read-only").arg(info.displayName);
    }
    if (s)
        worker += tr(" · %1 candidates").arg(s->tree.size());
    m_workerLabel->setText(worker);

    if (s && !s->device.empty()) {
        QString gpu = QStringLiteral("%1 (%2)").arg(
            QString::fromStdString(s->device.name), QString::fromStdString(s->device.arch));
        const auto ordered = evaluationsInOrder(*s);
        if (!ordered.empty() && ordered.back()->deviceAfter.available) {
            const auto& d = ordered.back()->deviceAfter;
            gpu += tr(" · SM %1 MHz · mem %2 MHz · %3 °C").arg(d.smClockMHz).arg(d.memClockMHz).arg(d.temperatureC);
            if (d.throttled())
                gpu += tr(" · throttled: %1").arg(QString::fromStdString(d.throttleText));
        } else if (s->device.smClockMHz > 0) {
            gpu += tr(" · SM ≤ %1 MHz").arg(s->device.smClockMHz);
        }
        m_gpuLabel->setText(gpu);
    } else {
        m_gpuLabel->clear();
    }
    if (s) {
        const auto best = bestCandidate(*s);
        if (best) {
            const auto& e = s->evaluations.at(*best);
            m_bestLabel->setText(tr("best %1: %2").arg(QString::fromStdString(*best), formatSpeedup(e.objective)));
        } else {
            m_bestLabel->setText(tr("no accepted candidate yet"));
        }
        const int maxEvals = s->settings.budget.maxEvaluations;
        if (maxEvals > 0) {
            const int used = std::min<int>(maxEvals, static_cast<int>(s->evaluations.size()));
            m_budget->setText(tr("budget %1 / %2 evaluations").arg(used).arg(maxEvals));
            // Wide enough for the largest count this budget reaches, so the text is never cut and never jumps.
            m_budget->setMinimumWidth(
                m_budget->fontMetrics().horizontalAdvance(tr("budget %1 / %1 evaluations").arg(maxEvals)) + 12);
            m_budget->show();
        } else {
            m_budget->hide();
        }
    }
}

QString MainWindow::statusText() const
{
    return m_workerLabel->text() + QStringLiteral(" | ") + m_bestLabel->text() + QStringLiteral(" | ")
        + m_gpuLabel->text();
}

void MainWindow::showMessage(const QString& text, int timeoutMs)
{
    statusBar()->showMessage(text, timeoutMs);
}

void MainWindow::reportProblem(const QString& text)
{
    m_messages->appendPlainText(
        QStringLiteral("%1  %2").arg(QTime::currentTime().toString(QStringLiteral("HH:mm:ss")), text));
    if (m_stack->currentWidget() == m_start) {
        m_start->setNotice(text);
    } else if (auto* dock = findChild<QDockWidget*>(QStringLiteral("messagesDock"))) {
        dock->show();
        dock->raise();
    }
    showMessage(tr("%1 (full text under View → Messages)").arg(text.left(120)), 10000);
}

QString MainWindow::budgetText() const
{
    return m_budget->text();
}

void MainWindow::applyRunState()
{
    // Followed run gone: the inbox has no reader, so decisions here would wait unseen.
    if (!m_controller->info().following)
        return;
    if (!m_controller->runHasStopped()) {
        if (m_runStopShown && m_controller->runState() == QLatin1String("running")) {
            m_runStopShown = false; // resumed (kloop run --resume): it reads the inbox again
            m_review->setWritable(m_controller->info().writable);
            m_console->setWritable(m_controller->info().writable);
            updateStatusBar();
        }
        return;
    }
    if (m_runStopShown)
        return;
    m_runStopShown = true;
    m_review->setWritable(false);
    m_console->setWritable(false);
    reportProblem(tr("kloop run has %1 (%2): %3 is no longer followed live. Approvals and hypotheses are off; "
                     "continue the run with kloop run --resume %3 to decide on its candidates.")
                      .arg(m_controller->runState(), m_controller->runStateReason(),
                          QDir::toNativeSeparators(m_controller->info().directory)));
    updateStatusBar();
}

void MainWindow::openSessionDialog(OpenMode mode)
{
    const QString dir = QFileDialog::getExistingDirectory(this,
        mode == OpenMode::Replay       ? tr("Replay session directory")
            : mode == OpenMode::Follow ? tr("Follow a session that kloop run is writing")
                                       : tr("Open session directory"));
    if (dir.isEmpty())
        return;
    if (mode == OpenMode::Writable && !QFileInfo(dir).isWritable())
        mode = OpenMode::Load;
    openSession(dir, mode, mode == OpenMode::Replay ? 4.0 : 1.0);
}

QString MainWindow::tuneFromTrace(const QString& problem, const QString& sessionRoot, QString* error)
{
    const auto traces = m_timeline->rowModel()->traces();
    if (!m_workload || traces.empty()) {
        if (error)
            *error = tr("Open a trace first: \"Tune this\" takes its shapes from it");
        return {};
    }
    const QString root = sessionRoot.isEmpty() ? defaultSessionRoot() : sessionRoot;
    const QString name = problem + QStringLiteral("-from-trace-")
        + QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"));
    kl::prof::TraceSessionRequest request;
    request.dir = QDir(root).filePath(name).toStdString();
    request.tracePath = traces.back().trace->meta().path;
    request.id = name.toStdString();
    try {
        request.problemFolder = kl::findProblemFolder(problem.toStdString());
        const kl::prof::TraceSession s = kl::prof::createSessionFromWorkload(*m_workload, request);
        const QString dir = QString::fromStdString(request.dir.string());
        openSession(dir, OpenMode::Writable);
        showMessage(tr("Session %1 tunes %2 at the %3 shapes the trace ran it at; run it with kloop run --resume %4")
                        .arg(QString::fromStdString(s.id), problem)
                        .arg(s.problem.tuningShapes.size())
                        .arg(QDir::toNativeSeparators(dir)),
            15000);
        return dir;
    } catch (const std::exception& e) {
        if (error)
            *error = tr("Tune %1: %2").arg(problem, QString::fromUtf8(e.what()));
        return {};
    }
}

void MainWindow::newSessionFromStartPage(const QString& problem)
{
    LocalRunRequest request;
    request.problem = problem;
    request.workers = m_start->workerSpecs();
    if (const QString error = m_start->workerSpecsError(); !error.isEmpty()) {
        m_start->setNotice(tr("No session started: %1").arg(error));
        return;
    }
    if (!request.workers.isEmpty() && !kloopExecutable().isEmpty()) {
        startLocalRun(request); // the pool's workers have the GPUs
        return;
    }
    if (!localGpuPresent() || kloopExecutable().isEmpty()) {
        QMessageBox::information(this, tr("New session"),
            tr("New sessions run where the GPU is%1. On the GPU host run:\n\n"
               "  kloop run --problem %2 --agent tuner:bayes --session DIR\n\n"
               "then open DIR here (File → Follow Running Session) to watch it live.")
                .arg(kloopExecutable().isEmpty() ? tr(" (and kloop was not found next to kernelloop)") : QString(),
                    problem));
        return;
    }
    startLocalRun(request);
}

bool MainWindow::followRunningLocalRun()
{
    const auto holder = GpuRunLock::holder(localGpuKey());
    if (!holder || holder->session.empty() || !QFileInfo::exists(QString::fromStdString(holder->session)))
        return false;
    const QString dir = QString::fromStdString(holder->session);
    openSession(dir, OpenMode::Follow);
    showMessage(tr("This machine's GPU is busy with kloop run (pid %1): following its session %2 instead of starting "
                   "a second run, which would time against it")
                    .arg(holder->pid)
                    .arg(QDir::toNativeSeparators(dir)),
        15000);
    return true;
}

bool MainWindow::startLocalRun(const LocalRunRequest& request)
{
    if (usesLocalGpu(request) && followRunningLocalRun())
        return true;
    QString error;
    if (!m_launcher->start(request, &error)) {
        const QString message = tr("Could not start a session on this machine's GPU: %1").arg(error);
        m_start->setNotice(message);
        showStartPage();
        showMessage(message, 15000);
        emit localRunFailed(message);
        return false;
    }
    // The run needs a moment to find the GPU and create the session; the start page says what is happening.
    m_start->setNotice(
        tr("Starting kloop run --problem %1 --agent %2 on %3 in %4…")
            .arg(request.problem, request.agent,
                request.workers.isEmpty() ? tr("this machine's GPU") : tr("the workers %1").arg(request.workers),
                QDir::toNativeSeparators(m_launcher->sessionDir())),
        false);
    showStartPage();
    showMessage(
        tr("Started kloop run for %1 in %2").arg(request.problem, QDir::toNativeSeparators(m_launcher->sessionDir())));
    return true;
}

void MainWindow::openTraceDialog()
{
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open trace"), QString(), tr("Traces (*.json *.json.gz *.sqlite *.kltrace);;All files (*)"));
    if (path.isEmpty())
        return;
    showWorkbench();
    m_timeline->loadTrace(path, false);
}

void MainWindow::addRecent(const QString& directory)
{
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("recentSessions")).toStringList();
    recent.removeAll(directory);
    recent.prepend(directory);
    while (recent.size() > 10)
        recent.removeLast();
    settings.setValue(QStringLiteral("recentSessions"), recent);
}

void MainWindow::restoreLayout()
{
    QSettings settings;
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    const QByteArray state = settings.value(QStringLiteral("window/state")).toByteArray();
    if (m_stack->currentWidget() == m_start)
        m_workbenchState = state;
    else
        restoreState(state, kLayoutVersion);
}

void MainWindow::saveLayout() const
{
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    const bool onStartPage = m_stack->currentWidget() == m_start;
    settings.setValue(QStringLiteral("window/state"),
        onStartPage && !m_workbenchState.isEmpty() ? m_workbenchState : saveState(kLayoutVersion));
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    saveLayout();
    QMainWindow::closeEvent(event);
}

} // namespace kl::app
