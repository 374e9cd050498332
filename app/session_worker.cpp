#include "app/session_worker.h"

#include "core/catalogue.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_inbox.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QPointer>
#include <algorithm>

namespace kl::app {

namespace {

    kl::Session headerOnly(const kl::Session& full)
    {
        kl::Session s;
        s.id = full.id;
        s.problemName = full.problemName;
        s.problemFolder = full.problemFolder;
        s.device = full.device;
        s.settings = full.settings;
        s.createdMs = full.createdMs;
        return s;
    }

    QString describe(const std::exception& e)
    {
        return QString::fromStdString(e.what());
    }

} // namespace

QStringList problemCatalogueDirs()
{
    QStringList dirs;
    const QString appDir = QCoreApplication::applicationDirPath();
    dirs << QDir(appDir).absoluteFilePath(QStringLiteral("../share/kernelloop/problems"));
    dirs << QDir(appDir).absoluteFilePath(QStringLiteral("problems"));
#ifdef KL_APP_SOURCE_DIR
    dirs << QStringLiteral(KL_APP_SOURCE_DIR "/kernels/problems");
#endif
    // The engine's own search path ($KL_PROBLEMS_DIR, installed share folder, source tree) comes first.
    QStringList engine;
    try {
        for (const auto& p : kl::problemSearchPath())
            engine << QString::fromStdString(p.string());
    } catch (const std::exception&) {
    }
    dirs = engine + dirs;
    dirs.removeDuplicates();
    return dirs;
}

std::optional<kl::Problem> findProblem(const kl::Session& s, const QString& sessionDir)
{
    std::vector<std::filesystem::path> roots;
    for (const QString& dir : problemCatalogueDirs())
        roots.emplace_back(dir.toStdString());
    try {
        return kl::loadProblem(kl::findSessionProblemFolder(s, {}, sessionDir.toStdString(), roots).string());
    } catch (const std::exception&) {
        return std::nullopt; // without its problem a session only loses the tolerance line
    }
}

SessionWorker::SessionWorker(QObject* parent)
    : QObject(parent)
    , m_timer(new QTimer(this))
    , m_publishTimer(new QTimer(this))
    , m_followTimer(new QTimer(this))
    , m_liveTimer(new QTimer(this))
{
    m_liveTimer->setInterval(kLivePollMs);
    connect(m_liveTimer, &QTimer::timeout, this, &SessionWorker::pollLiveStream);
    m_followTimer->setInterval(kFollowPollMs);
    connect(m_followTimer, &QTimer::timeout, this, &SessionWorker::pollJournal);
    m_timer->setSingleShot(true);
    connect(m_timer, &QTimer::timeout, this, &SessionWorker::step);
    m_publishTimer->setSingleShot(true);
    connect(m_publishTimer, &QTimer::timeout, this, [this]() {
        if (m_dirty)
            publish(false);
    });
}

SessionWorker::~SessionWorker()
{
    close();
}

void SessionWorker::close()
{
    ++m_generation;
    m_timer->stop();
    m_publishTimer->stop();
    m_followTimer->stop();
    m_liveTimer->stop();
    m_live.reset();
    m_journal.reset();
    if (m_store && m_busToken)
        m_store->bus().unsubscribe(m_busToken);
    m_busToken = 0;
    m_store.reset();
    m_session = kl::Session();
    m_events.clear();
    m_dueMs.clear();
    m_unpublished.clear();
    m_next = 0;
    m_replaying = false;
    m_dirty = false;
}

void SessionWorker::open(const QString& directory, OpenMode mode, double speed, qint64 maxGapMs)
{
    close();
    OpenedSession info;
    info.directory = directory;
    info.displayName = QDir(directory).dirName();
    const std::filesystem::path dir = directory.toStdString();
    kl::LoadReport report;
    std::vector<kl::Event> events;
    kl::JournalReader journal(dir / "journal.jsonl");
    kl::Session full;
    m_steerDir.clear();
    try {
        if (mode == OpenMode::Writable) {
            try {
                m_store = kl::SessionStore::open(dir, &report);
                full = m_store->session();
                events = m_store->events();
            } catch (const kl::SessionLockedError&) {
                // kloop run is writing it: follow it live and steer it through its inbox.
                mode = OpenMode::Follow;
                report.warnings.push_back("another process (kloop run) is writing this session: following it live; "
                                          "reviews, hypotheses and branches go to the run through its inbox");
                full = kl::SessionStore::load(dir, &report, &events, &journal);
            }
        } else {
            full = kl::SessionStore::load(dir, &report, &events, &journal);
        }
        if (mode == OpenMode::Follow)
            m_steerDir = dir;
    } catch (const std::exception& e) {
        m_store.reset();
        emit failed(tr("Could not open session %1: %2").arg(directory, describe(e)));
        return;
    }
    for (const auto& w : report.warnings)
        info.warnings << QString::fromStdString(w);
    info.writable = m_store != nullptr || !m_steerDir.empty();
    info.replaying = mode == OpenMode::Replay;
    info.following = mode == OpenMode::Follow;
    info.problem = findProblem(full, directory);
    info.eventCount = events.size();
    emit opened(info);

    const std::uint64_t generation = m_generation;
    if (m_store) {
        QPointer<SessionWorker> self(this);
        m_busToken = m_store->bus().subscribe([self, generation](const kl::Event& e) {
            // Store writes may happen on any thread; the worker applies events on its own.
            QMetaObject::invokeMethod(
                self.data(),
                [self, generation, e]() {
                    if (self && self->m_generation == generation)
                        self->onLiveEvent(e);
                },
                Qt::QueuedConnection);
        });
    }

    if (mode == OpenMode::Follow) {
        m_journal = std::move(journal);
        m_followTimer->start();
        m_live = std::make_unique<kl::LiveStreamReader>(dir);
        // Without a running writer, a reply "streaming" in the live file is what a killed run left behind.
        if (!kl::sessionHasWriter(dir))
            m_live->skipCurrent();
        m_liveTimer->start();
    }
    if (mode != OpenMode::Replay) {
        m_session = std::move(full);
        m_events = std::move(events);
        m_next = m_events.size();
        m_unpublished = m_events;
        publish(true);
        m_events.clear();
        return;
    }

    m_session = headerOnly(full);
    m_events = std::move(events);
    m_speed = speed;
    m_maxGapMs = std::max<qint64>(1, maxGapMs);
    m_dueMs.resize(m_events.size());
    qint64 due = 0;
    for (std::size_t i = 0; i < m_events.size(); ++i) {
        if (i > 0)
            due += std::clamp<qint64>(m_events[i].timeMs - m_events[i - 1].timeMs, 0, m_maxGapMs);
        m_dueMs[i] = due;
    }
    m_replaying = true;
    m_paused = false;
    m_replayOffsetMs = 0;
    m_clock.start();
    m_sincePublish.start();
    publish(false);
    step();
}

void SessionWorker::setPaused(bool paused)
{
    if (!m_replaying || paused == m_paused)
        return;
    if (paused) {
        m_replayOffsetMs += static_cast<qint64>(m_clock.elapsed() * std::max(m_speed, 0.0));
        m_timer->stop();
    } else {
        m_clock.restart();
    }
    m_paused = paused;
    if (!paused)
        step();
}

void SessionWorker::setSpeed(double speed)
{
    if (m_replaying && !m_paused) {
        m_replayOffsetMs += static_cast<qint64>(m_clock.elapsed() * std::max(m_speed, 0.0));
        m_clock.restart();
    }
    m_speed = speed;
    if (m_replaying && !m_paused)
        step();
}

void SessionWorker::step()
{
    if (!m_replaying || m_paused)
        return;
    const bool asFastAsPossible = m_speed <= 0;
    const qint64 now = m_replayOffsetMs + static_cast<qint64>(m_clock.elapsed() * std::max(m_speed, 0.0));
    // In fast mode, apply a bounded batch per turn so close() and pause requests are still served.
    std::size_t budget = asFastAsPossible ? 256 : m_events.size();
    while (m_next < m_events.size() && budget > 0 && (asFastAsPossible || m_dueMs[m_next] <= now)) {
        try {
            kl::applyEvent(m_session, m_events[m_next]);
        } catch (const std::exception& e) {
            emit failed(tr("Replay stopped at event %1: %2").arg(m_events[m_next].seq).arg(describe(e)));
            m_replaying = false;
            publish(true);
            return;
        }
        m_unpublished.push_back(m_events[m_next]);
        m_dirty = true;
        ++m_next;
        --budget;
    }
    const bool done = m_next >= m_events.size();
    if (done) {
        m_replaying = false;
        publish(true);
        return;
    }
    if (m_dirty && m_sincePublish.elapsed() >= kSnapshotIntervalMs)
        publish(false);
    scheduleNext();
}

void SessionWorker::scheduleNext()
{
    if (m_speed <= 0) {
        m_timer->start(m_dirty ? 1 : 0);
        return;
    }
    const qint64 now = m_replayOffsetMs + static_cast<qint64>(m_clock.elapsed() * m_speed);
    qint64 waitMs = static_cast<qint64>((m_dueMs[m_next] - now) / m_speed);
    if (m_dirty)
        waitMs = std::min<qint64>(waitMs, kSnapshotIntervalMs - m_sincePublish.elapsed());
    m_timer->start(static_cast<int>(std::clamp<qint64>(waitMs, 0, 60'000)));
}

void SessionWorker::onLiveEvent(const kl::Event& e)
{
    try {
        kl::applyEvent(m_session, e);
    } catch (const std::exception& ex) {
        emit writeFailed(tr("Could not apply event %1: %2").arg(e.seq).arg(describe(ex)));
        return;
    }
    m_unpublished.push_back(e);
    m_dirty = true;
    if (m_sincePublish.isValid() && m_sincePublish.elapsed() < kSnapshotIntervalMs) {
        if (!m_publishTimer->isActive())
            m_publishTimer->start(static_cast<int>(kSnapshotIntervalMs - m_sincePublish.elapsed()));
        return;
    }
    publish(false);
}

void SessionWorker::pollJournal()
{
    try {
        m_journal->readAppended([this](kl::Event e) {
            kl::applyEvent(m_session, e);
            m_unpublished.push_back(std::move(e));
            m_dirty = true;
        });
    } catch (const std::exception& ex) {
        emit failed(tr("A new journal line could not be applied (%1); following stopped").arg(describe(ex)));
        m_followTimer->stop();
    }
    if (m_dirty)
        publish(false);
}

void SessionWorker::pollLiveStream()
{
    if (!m_live)
        return;
    LiveStreamBatch records = m_live->poll();
    if (records.empty())
        return;
    // The journal first: the request record written before the stream reaches the GUI before its text. (A reply
    // record written after these lines may come first too; the console reconciles the two.)
    if (m_followTimer->isActive())
        pollJournal();
    emit liveStream(records);
}

void SessionWorker::publish(bool finished)
{
    FeedUpdate u;
    u.session = std::make_shared<const kl::Session>(m_session);
    u.events = std::move(m_unpublished);
    m_unpublished.clear();
    u.total = m_events.empty() ? m_next : m_events.size();
    u.applied = m_events.empty() ? m_next : m_next;
    u.finished = finished;
    m_dirty = false;
    m_sincePublish.start();
    emit updated(u);
}

void SessionWorker::postToRun(const kl::InboxRequest& request)
{
    try {
        kl::postInboxRequest(m_steerDir, request);
    } catch (const std::exception& e) {
        emit writeFailed(tr("Could not send the request to the running session: %1").arg(describe(e)));
    }
}

void SessionWorker::recordReview(const QString& candidateId, bool approved, const QString& reason)
{
    if (!m_store && !m_steerDir.empty()) {
        postToRun({ kl::InboxRequest::Kind::Review, candidateId.toStdString(), approved, reason.toStdString() });
        return;
    }
    if (!m_store) {
        emit writeFailed(tr("This session is open read-only; the decision on %1 was not recorded.").arg(candidateId));
        return;
    }
    try {
        kl::ReviewDecision r;
        r.candidateId = candidateId.toStdString();
        r.approved = approved;
        r.reason = reason.toStdString();
        r.decidedMs = kl::nowMs();
        m_store->recordReview(r);
    } catch (const std::exception& e) {
        emit writeFailed(tr("Could not record the decision on %1: %2").arg(candidateId, describe(e)));
    }
}

void SessionWorker::addHypothesis(const QString& text)
{
    if (!m_store && !m_steerDir.empty()) {
        postToRun({ kl::InboxRequest::Kind::Hypothesis, {}, false, text.toStdString() });
        return;
    }
    if (!m_store) {
        emit writeFailed(tr("This session is open read-only; the hypothesis was not recorded."));
        return;
    }
    try {
        kl::Hypothesis h;
        h.text = text.toStdString();
        h.author = kl::Author::Human;
        h.createdMs = kl::nowMs();
        m_store->addHypothesis(h);
    } catch (const std::exception& e) {
        emit writeFailed(tr("Could not record the hypothesis: %1").arg(describe(e)));
    }
}

void SessionWorker::moveHead(const QString& candidateId, const QString& why)
{
    if (!m_store && !m_steerDir.empty()) {
        postToRun({ kl::InboxRequest::Kind::Branch, candidateId.toStdString(), false, why.toStdString() });
        return;
    }
    if (!m_store) {
        emit writeFailed(tr("This session is open read-only; cannot branch from %1.").arg(candidateId));
        return;
    }
    try {
        m_store->moveHead(candidateId.toStdString(), why.toStdString());
    } catch (const std::exception& e) {
        emit writeFailed(tr("Could not branch from %1: %2").arg(candidateId, describe(e)));
    }
}

} // namespace kl::app
