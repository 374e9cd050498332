#pragma once
// The timeline dock: loads traces off the GUI thread (cancellable, with progress), shows them in a
// TimelineView with a row list, and reports the statistics of the selected range.
#include "app/models/trace_row_model.h"
#include "app/timeline_view.h"
#include "core/cancel.h"

#include <QFutureWatcher>
#include <QWidget>

class QLabel;
class QProgressBar;
class QPushButton;
class QTableView;
class QTextBrowser;

namespace kl::app {

struct TraceLoadResult {
    std::shared_ptr<const kl::prof::Trace> trace;
    QString label;
    QString error;
};

class TimelinePanel : public QWidget {
    Q_OBJECT
public:
    explicit TimelinePanel(QWidget* parent = nullptr);
    ~TimelinePanel() override;

    // append: show it under the traces already loaded (baseline above candidate).
    void loadTrace(const QString& path, bool append = false);
    void setTraces(std::vector<TimelineTrace> traces);
    void cancelLoad();

    TimelineView* view() const { return m_view; }
    TraceRowModel* rowModel() const { return m_rowModel; }
    QString selectionText() const;
    bool isLoading() const { return m_watcher.isRunning(); }

signals:
    void traceLoaded(const QString& label);
    void loadFailed(const QString& message);
    void tracesChanged();
    void selectionChanged(const kl::app::SelectionStats& stats);
    void openTraceRequested(bool append);

private:
    TraceRowModel* m_rowModel;
    TimelineView* m_view;
    QTableView* m_rowList;
    QTextBrowser* m_stats;
    QLabel* m_title;
    QProgressBar* m_progress;
    QPushButton* m_cancel;
    QFutureWatcher<TraceLoadResult> m_watcher;
    kl::CancelToken m_cancelToken;
    bool m_appendPending = false;
};

} // namespace kl::app

Q_DECLARE_METATYPE(kl::app::SelectionStats)
