#pragma once
// The workbench window: the diff in the centre, docks for candidates, charts, review, hypotheses,
// timeline and bottlenecks; a start page before a session is open. It only wires signals: data comes
// from SessionController snapshots, views are the panels.
#include "app/app_types.h"
#include "app/latest_job.h"
#include "app/local_run.h"
#include "app/session_worker.h"

#include <QMainWindow>
#include <memory>

class QDockWidget;
class QLabel;
class QPlainTextEdit;
class QStackedWidget;
class QTableView;
class QTimer;

namespace kl::prof {
struct Analysis;
struct Workload;
} // namespace kl::prof

namespace kl::app {

class CandidatePanel;
class ChartsPanel;
class DiffView;
class HypothesisConsole;
class RegimesPanel;
class ReviewPanel;
class SessionController;
class StatusField;
class StartPage;
class TimelinePanel;
class WorkersPanel;
class PipelinePanel;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    void openSession(const QString& directory, OpenMode mode, double speed = 1.0);
    void showStartPage();
    void showWorkbench();
    void compare(const QString& oldId, const QString& newId);
    // Exports through kl_export (the bundle `kloop export` writes). Refused candidates fail with the refusals in
    // error unless force, which exports anyway and writes the reasons into the bundle (kloop export --force).
    bool exportTo(const QString& candidateId, const QString& directory, QString* error = nullptr, bool force = false);
    // The Ctrl+E flow after the folder is chosen: refusals are shown with their reasons, and a forced export
    // needs a second confirmation that names them.
    void exportWithReview(const QString& candidateId, const QString& directory);
    // Starts kloop run on this machine's GPU and follows the session once it exists; false if it could not
    // start (the start page then says why).
    bool startLocalRun(const LocalRunRequest& request);
    // When a kloop run already holds this machine's GPU, opens its session in follow mode instead of starting a
    // second run that would time against it. Returns whether it did.
    bool followRunningLocalRun();
    LocalRunLauncher* localRun() const { return m_launcher; }
    // "Tune this" on an operation of the loaded trace: a session whose tuning shapes are the ones the traced model
    // ran the problem at (under sessionRoot, defaultSessionRoot() when empty), opened here. Empty with *error when
    // it could not be made.
    QString tuneFromTrace(const QString& problem, const QString& sessionRoot = {}, QString* error = nullptr);

    SessionController* controller() const { return m_controller; }
    CandidatePanel* candidatePanel() const { return m_candidates; }
    DiffView* diffView() const { return m_diff; }
    ChartsPanel* chartsPanel() const { return m_charts; }
    ReviewPanel* reviewPanel() const { return m_review; }
    HypothesisConsole* hypothesisConsole() const { return m_console; }
    StartPage* startPage() const { return m_start; }
    TimelinePanel* timelinePanel() const { return m_timeline; }
    QWidget* bottleneckPanel() const { return m_bottleneck; }
    WorkersPanel* workersPanel() const { return m_workersPanel; }
    PipelinePanel* pipelinePanel() const { return m_pipelinePanel; }
    // Errors and warnings, with the time they happened, in full: the status bar only says that one arrived.
    QPlainTextEdit* messageLog() const { return m_messages; }
    QString budgetText() const;
    QList<QDockWidget*> docks() const;
    QString statusText() const;

    void restoreLayout();
    void saveLayout() const;

signals:
    void sessionReady(); // opened and the first snapshot shown
    void localRunFailed(const QString& message);

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void createActions();
    QDockWidget* addDock(const QString& title, const QString& objectName, QWidget* widget, Qt::DockWidgetArea area);
    void onOpened(const OpenedSession& info);
    void onSessionUpdated(const SessionSnapshot& s);
    void onCurrentCandidate(const QString& id);
    void showLoopProfile();
    void updateStatusBar();
    void showMessage(const QString& text, int timeoutMs = 6000);
    // Into the message log (raised) and, briefly, the status bar; on the start page also its notice.
    void reportProblem(const QString& text);
    void applyRunState();
    void openSessionDialog(OpenMode mode);
    void openTraceDialog();
    void exportDialog(const QString& id);
    void addRecent(const QString& directory);
    void newSessionFromStartPage(const QString& problem);

    SessionController* m_controller;
    QStackedWidget* m_stack;
    StartPage* m_start;
    DiffView* m_diff;
    CandidatePanel* m_candidates;
    ChartsPanel* m_charts;
    ReviewPanel* m_review;
    HypothesisConsole* m_console;
    TimelinePanel* m_timeline;
    QWidget* m_bottleneck;
    std::shared_ptr<const kl::prof::Workload> m_workload; // of the trace under study, for "Tune this"
    WorkersPanel* m_workersPanel;
    PipelinePanel* m_pipelinePanel;
    RegimesPanel* m_regimes; // each regime's winner (problem.json "regimes") and the regimes its measurements suggest
    StatusField* m_workerLabel;
    StatusField* m_gpuLabel;
    StatusField* m_bestLabel;
    QTimer* m_statusTimer;
    StatusField* m_budget;
    QPlainTextEdit* m_messages;
    bool m_runStopShown = false;
    LocalRunLauncher* m_launcher;
    QByteArray m_defaultState;
    QByteArray m_workbenchState; // dock layout while the start page hides the docks
    QString m_diffShownFor; // candidate whose diff is shown, to skip redundant rebuilds
    std::string m_diffSourceHash;
    bool m_sessionReadyEmitted = false;
    double m_speed = 1.0;
    // The bottleneck panel's reading of the last trace: the analysis and the operations problems fit.
    LatestJob<std::pair<kl::prof::Analysis, std::shared_ptr<const kl::prof::Workload>>> m_traceAnalysis { this };
};

} // namespace kl::app
