#pragma once
// Background work whose result is wanted only while nothing newer was asked for: start() runs the work on the Qt
// thread pool and hands its result to `done` on the owner's thread if no later start() (or drop()) came in the
// meantime. A slow earlier job that finishes after a newer one is discarded, so a stale result can never overwrite
// a newer one.
#include <QFutureWatcher>
#include <QObject>
#include <QtConcurrent/QtConcurrentRun>
#include <cstdint>
#include <utility>

namespace kl::app {

template <typename Result> class LatestJob {
public:
    // `owner` outlives the job object (it is usually its member): results arrive on the owner's thread.
    explicit LatestJob(QObject* owner)
        : m_owner(owner)
    {
    }
    LatestJob(const LatestJob&) = delete;
    LatestJob& operator=(const LatestJob&) = delete;

    template <typename Work, typename Done> void start(Work work, Done done)
    {
        const std::uint64_t ticket = ++m_latest;
        auto* watcher = new QFutureWatcher<Result>(m_owner);
        QObject::connect(
            watcher, &QFutureWatcher<Result>::finished, m_owner, [this, watcher, ticket, done = std::move(done)]() {
                if (ticket == m_latest)
                    done(watcher->result());
                watcher->deleteLater();
            });
        watcher->setFuture(QtConcurrent::run(std::move(work)));
    }

    // The jobs started so far deliver nothing.
    void drop() { ++m_latest; }

private:
    QObject* m_owner;
    std::uint64_t m_latest = 0;
};

} // namespace kl::app
