#pragma once
// Lives on its own thread. Loads a session directory, replays its journal with the original timing
// (scaled) or follows a writable store live, applies each event to its private kl::Session and hands
// immutable snapshots to the GUI through queued signals, at most one per snapshot interval.
#include "app/app_types.h"
#include "core/journal_reader.h"
#include "core/session_inbox.h"
#include "core/session_store.h"

#include <QElapsedTimer>
#include <QObject>
#include <QTimer>
#include <memory>

namespace kl::app {

enum class OpenMode {
    Load, // read-only, everything applied at once
    Replay, // read-only, the journal re-emitted with its recorded timing
    Writable, // SessionStore::open: reviews and hypotheses are appended to the journal
    Follow, // read-only, and new journal lines written by another process (kloop run) are applied as they land
};

class SessionWorker : public QObject {
    Q_OBJECT
public:
    explicit SessionWorker(QObject* parent = nullptr);
    ~SessionWorker() override;

    // Slots below run on the worker thread (invoked through queued calls).
    void open(const QString& directory, kl::app::OpenMode mode, double speed, qint64 maxGapMs);
    void close();
    void setPaused(bool paused);
    void setSpeed(double speed); // <= 0: as fast as possible
    void recordReview(const QString& candidateId, bool approved, const QString& reason);
    void addHypothesis(const QString& text);
    void moveHead(const QString& candidateId, const QString& why);

    // At most ~16 snapshots a second: fast enough to look live, slow enough that a fast replay never floods the
    // GUI thread with model updates.
    static constexpr int kSnapshotIntervalMs = 60;

signals:
    void opened(const kl::app::OpenedSession& info);
    void updated(const kl::app::FeedUpdate& update);
    void failed(const QString& message);
    void writeFailed(const QString& message);
    void liveStream(const kl::app::LiveStreamBatch& records);

private:
    void onLiveEvent(const kl::Event& e);
    void step();
    void publish(bool finished);
    void scheduleNext();
    void resetClock();
    void pollJournal();
    void pollLiveStream();

    std::unique_ptr<kl::SessionStore> m_store;
    std::filesystem::path m_steerDir; // a session kloop run is writing: decisions go to its inbox
    void postToRun(const kl::InboxRequest& request);
    std::uint64_t m_busToken = 0;
    kl::Session m_session;
    std::vector<kl::Event> m_events; // the journal being replayed
    std::vector<qint64> m_dueMs; // when each event is due, in scaled replay time
    std::size_t m_next = 0;
    std::vector<kl::Event> m_unpublished;
    bool m_dirty = false;
    bool m_replaying = false;
    bool m_paused = false;
    double m_speed = 1.0;
    qint64 m_maxGapMs = 2000;
    qint64 m_replayOffsetMs = 0; // replay time already elapsed before the current clock start
    QElapsedTimer m_clock;
    QElapsedTimer m_sincePublish;
    QTimer* m_timer = nullptr; // replay: when the next event is due
    QTimer* m_publishTimer = nullptr; // live: a deferred snapshot after a burst of events
    std::uint64_t m_generation = 0; // bumps on open/close so stale queued live events are dropped
    QTimer* m_followTimer = nullptr;
    std::optional<kl::JournalReader> m_journal; // follow mode: after the last event applied
    std::unique_ptr<kl::LiveStreamReader> m_live; // follow mode: the agent's reply while it streams
    QTimer* m_liveTimer = nullptr;

public:
    static constexpr int kFollowPollMs = 250;
    // Streamed text should feel live; a poll is a stat and, when something was appended, one read.
    static constexpr int kLivePollMs = 50;
};

// Finds the problem of a session: an absolute folder, relative to the session, or in a catalogue.
std::optional<kl::Problem> findProblem(const kl::Session& s, const QString& sessionDir);
// Folders that may hold kernels/problems/<name>/problem.json (next to the binary, the source tree).
QStringList problemCatalogueDirs();

} // namespace kl::app
