#pragma once
// The GUI-thread face of a session: owns the worker thread, forwards requests to it and republishes
// its snapshots. Widgets connect to this and never see the worker.
#include "app/app_types.h"
#include "app/session_worker.h"

#include <QObject>
#include <QThread>

namespace kl::app {

class SessionController : public QObject {
    Q_OBJECT
public:
    explicit SessionController(QObject* parent = nullptr);
    ~SessionController() override;

    void open(const QString& directory, OpenMode mode, double speed = 1.0, qint64 maxGapMs = 2000);
    void close();
    void setPaused(bool paused);
    void setSpeed(double speed);
    void recordReview(const QString& candidateId, bool approved, const QString& reason);
    void addHypothesis(const QString& text);
    void branchFrom(const QString& candidateId);

    const SessionSnapshot& session() const { return m_session; }
    const OpenedSession& info() const { return m_info; }
    bool isOpen() const { return m_isOpen; }
    bool isWritable() const { return m_info.writable; }
    bool isReplaying() const { return m_replaying; }
    bool isPaused() const { return m_paused; }
    double speed() const { return m_speed; }
    std::size_t eventsApplied() const { return m_applied; }
    // The run's state as its journal last recorded it ("running", "stopped", "finished", "failed"; empty before
    // any), with the reason. In follow mode, anything but "running" means nothing reads the inbox any more.
    const QString& runState() const { return m_runState; }
    const QString& runStateReason() const { return m_runStateReason; }
    bool runHasStopped() const { return !m_runState.isEmpty() && m_runState != QLatin1String("running"); }

signals:
    void opened(const kl::app::OpenedSession& info);
    void sessionUpdated(const kl::app::SessionSnapshot& session);
    void eventsArrived(const std::vector<kl::Event>& events);
    void agentStreamArrived(const kl::app::LiveStreamBatch& records); // follow mode: the reply as it streams
    void replayProgress(std::size_t applied, std::size_t total);
    void replayFinished();
    void failed(const QString& message);
    void closed();

private:
    void onUpdated(const FeedUpdate& u);

    QThread m_thread;
    SessionWorker* m_worker = nullptr;
    SessionSnapshot m_session;
    OpenedSession m_info;
    bool m_isOpen = false;
    bool m_replaying = false;
    bool m_paused = false;
    double m_speed = 1.0;
    std::size_t m_applied = 0;
    QString m_runState;
    QString m_runStateReason;
    std::uint64_t m_generation = 0; // updates queued before a close/reopen are dropped
    std::uint64_t m_workerGeneration = 0;
};

} // namespace kl::app
