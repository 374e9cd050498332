#pragma once
// The Workers panel: where a session's evaluations run (state, GPU, clocks, in flight, evaluations, last error).
// Its rows come from snapshots only, refreshed on the GUI thread by a timer, from one of:
//   a live source   a function returning a kl::PoolSnapshot (WorkerPool::snapshot() copies under the pool's lock,
//                   so it is safe on any thread and never waits for a GPU);
//   a session dir   the workers.status.json that `kloop run --workers` rewrites while it runs;
//   the journal     per-worker counts from each evaluation's measured_on, for a session with neither.
#include "app/app_types.h"
#include "kernels/pool/worker_status.h"

#include <QString>
#include <QWidget>
#include <functional>

class QLabel;
class QTableView;
class QTimer;

namespace kl::app {

class WorkerTableModel;

class WorkersPanel : public QWidget {
    Q_OBJECT
public:
    explicit WorkersPanel(QWidget* parent = nullptr);

    using Source = std::function<kl::PoolSnapshot()>;
    void setLiveSource(Source source); // empty: none
    void followSession(const QString& directory); // empty: none
    void setSession(const SessionSnapshot& session); // the journal's counts, when no live snapshot is there
    void clear();
    void refresh(); // what the timer does

    WorkerTableModel* model() const { return m_model; }
    QTableView* view() const { return m_view; }
    QString summary() const; // the line above the table
    static constexpr int kRefreshMs = 500;

private:
    void show(const kl::PoolSnapshot& pool, const QString& origin);

    WorkerTableModel* m_model;
    QTableView* m_view;
    QLabel* m_summary;
    QTimer* m_timer;
    Source m_source;
    QString m_sessionDir;
    SessionSnapshot m_session;
};

} // namespace kl::app
