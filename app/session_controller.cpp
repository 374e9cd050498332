#include "app/session_controller.h"

namespace kl::app {

SessionController::SessionController(QObject* parent)
    : QObject(parent)
{
    qRegisterMetaType<kl::app::SessionSnapshot>();
    qRegisterMetaType<kl::app::FeedUpdate>();
    qRegisterMetaType<kl::app::OpenedSession>();
    qRegisterMetaType<std::vector<kl::Event>>();
    qRegisterMetaType<kl::app::LiveStreamBatch>();
    m_thread.setObjectName(QStringLiteral("kl-session"));
    m_worker = new SessionWorker;
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    connect(m_worker, &SessionWorker::opened, this, [this](const OpenedSession& info) {
        if (m_workerGeneration != m_generation)
            return;
        m_info = info;
        m_isOpen = true;
        m_replaying = info.replaying;
        emit opened(info);
    });
    connect(m_worker, &SessionWorker::updated, this, [this](const FeedUpdate& u) {
        if (m_workerGeneration == m_generation)
            onUpdated(u);
    });
    connect(m_worker, &SessionWorker::liveStream, this, [this](const LiveStreamBatch& records) {
        if (m_workerGeneration == m_generation)
            emit agentStreamArrived(records);
    });
    connect(m_worker, &SessionWorker::failed, this, &SessionController::failed);
    connect(m_worker, &SessionWorker::writeFailed, this, &SessionController::failed);
    m_thread.start();
}

SessionController::~SessionController()
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker]() { w->close(); }, Qt::BlockingQueuedConnection);
    m_thread.quit();
    m_thread.wait();
}

void SessionController::open(const QString& directory, OpenMode mode, double speed, qint64 maxGapMs)
{
    ++m_generation;
    m_isOpen = false;
    m_applied = 0;
    m_runState.clear();
    m_runStateReason.clear();
    m_paused = false;
    m_speed = speed;
    const std::uint64_t generation = m_generation;
    QMetaObject::invokeMethod(
        m_worker,
        [this, w = m_worker, directory, mode, speed, maxGapMs, generation]() {
            // Runs on the worker thread; the generation tags what it emits for the GUI side.
            QMetaObject::invokeMethod(
                this, [this, generation]() { m_workerGeneration = generation; }, Qt::QueuedConnection);
            w->open(directory, mode, speed, maxGapMs);
        },
        Qt::QueuedConnection);
}

void SessionController::close()
{
    ++m_generation;
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker]() { w->close(); }, Qt::QueuedConnection);
    m_session.reset();
    m_info = OpenedSession();
    m_isOpen = false;
    m_replaying = false;
    emit closed();
}

void SessionController::setPaused(bool paused)
{
    m_paused = paused;
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, paused]() { w->setPaused(paused); }, Qt::QueuedConnection);
}

void SessionController::setSpeed(double speed)
{
    m_speed = speed;
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, speed]() { w->setSpeed(speed); }, Qt::QueuedConnection);
}

void SessionController::recordReview(const QString& candidateId, bool approved, const QString& reason)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, candidateId, approved, reason]() { w->recordReview(candidateId, approved, reason); },
        Qt::QueuedConnection);
}

void SessionController::addHypothesis(const QString& text)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, text]() { w->addHypothesis(text); }, Qt::QueuedConnection);
}

void SessionController::branchFrom(const QString& candidateId)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, candidateId]() { w->moveHead(candidateId, QStringLiteral("branch from the GUI")); },
        Qt::QueuedConnection);
}

void SessionController::onUpdated(const FeedUpdate& u)
{
    m_session = u.session;
    m_applied = u.applied;
    for (const kl::Event& e : u.events)
        if (e.kind == kl::EventKind::SessionState && e.data.is_object()) {
            const auto text = [&e](const char* key) {
                const auto it = e.data.find(key);
                return it != e.data.end() && it->is_string() ? QString::fromStdString(it->get<std::string>())
                                                             : QString();
            };
            m_runState = text("state");
            m_runStateReason = text("reason");
        }
    emit sessionUpdated(m_session);
    if (!u.events.empty())
        emit eventsArrived(u.events);
    if (m_replaying) {
        emit replayProgress(u.applied, u.total);
        if (u.finished) {
            m_replaying = false;
            emit replayFinished();
        }
    }
}

} // namespace kl::app
