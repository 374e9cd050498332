#pragma once
// Values that cross from the session worker thread to the GUI thread. A snapshot is immutable once
// published, so models and widgets read it without locks.
#include "core/events.h"
#include "core/live_agent_stream.h"
#include "core/problem.h"
#include "core/session.h"

#include <QMetaType>
#include <QString>
#include <QStringList>
#include <memory>
#include <optional>
#include <vector>

namespace kl::app {

using SessionSnapshot = std::shared_ptr<const kl::Session>;

// What a session worker hands to the GUI after applying a batch of events.
struct FeedUpdate {
    SessionSnapshot session;
    std::vector<kl::Event> events; // applied since the previous update, in journal order
    std::size_t applied = 0; // replay progress; equal to total when live
    std::size_t total = 0;
    bool finished = false; // the replay reached the end of the journal
};

// Sent once when a session has been loaded (before any FeedUpdate of it).
struct OpenedSession {
    QString directory;
    QString displayName;
    bool writable = false;
    bool replaying = false;
    bool following = false; // another process (kloop run) writes it; new journal lines are applied live
    QStringList warnings; // e.g. a torn last journal line
    std::optional<kl::Problem> problem; // when its folder could be found
    std::size_t eventCount = 0;
};

// Lines of the agent's reply streaming in (a session that kloop run is writing), in the order written.
using LiveStreamBatch = std::vector<kl::LiveStreamRecord>;

} // namespace kl::app

Q_DECLARE_METATYPE(kl::app::LiveStreamBatch)
Q_DECLARE_METATYPE(kl::app::SessionSnapshot)
Q_DECLARE_METATYPE(kl::app::FeedUpdate)
Q_DECLARE_METATYPE(kl::app::OpenedSession)
