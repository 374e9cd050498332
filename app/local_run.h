#pragma once
// A research run on this machine's GPU: the workbench starts `kloop run` as its own process (it owns the
// GPU and the journal, and keeps running when the window closes) and opens the session in follow mode once
// the run has created it. The GPU probe and the kloop executable can be replaced, so the path is tested on
// machines without a GPU with a fake kloop.
#include <QElapsedTimer>
#include <QObject>
#include <QString>
#include <QStringList>
#include <functional>

class QTimer;

namespace kl::app {

// Whether the NVIDIA driver lists a GPU here ($KL_LOCAL_GPU=0/1 overrides). Cheap: no CUDA is loaded.
bool localGpuPresent();
// Replaces the probe (tests); an empty function restores the real one.
void setLocalGpuProbe(std::function<bool()> probe);

// $KL_KLOOP, then kloop next to kernelloop, then the build tree's ../cli/kloop, then PATH. Empty if none.
QString kloopExecutable();

// Where new sessions go: $KL_SESSIONS_DIR, else <app data>/sessions (~/.local/share/KernelLoop/kernelloop/sessions).
QString defaultSessionRoot();

struct LocalRunRequest {
    QString problem = QStringLiteral("rmsnorm");
    QString agent = QStringLiteral("tuner:bayes");
    QString sessionRoot; // empty: defaultSessionRoot()
    QString workers; // kloop run --workers (worker specs); empty: this machine's GPU
    QStringList extraArgs; // appended to kloop run's arguments
    int createTimeoutMs = 60000; // the run must create its journal within this time
};

// Whether the run evaluates on this machine's GPU (no --workers, or a local worker among them).
bool usesLocalGpu(const LocalRunRequest& request);

class LocalRunLauncher : public QObject {
    Q_OBJECT
public:
    explicit LocalRunLauncher(QObject* parent = nullptr);

    // Starts kloop run in a new session directory; false (with the reason) if it could not be started.
    bool start(const LocalRunRequest& request, QString* error = nullptr);
    bool isWaiting() const;
    QString sessionDir() const { return m_dir; }
    QString logFile() const { return m_log; }
    QStringList arguments() const { return m_args; }

signals:
    void sessionCreated(const QString& directory); // the journal exists: open it in follow mode
    void failed(const QString& message); // the run exited or timed out before creating its session

private:
    void poll();
    QString logTail() const;

    QTimer* m_poll;
    QElapsedTimer m_clock;
    QString m_dir;
    QString m_log;
    QStringList m_args;
    qint64 m_pid = 0;
    int m_timeoutMs = 60000;
};

} // namespace kl::app
