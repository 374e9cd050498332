#include "app/timeline_panel.h"

#include "profiler/importers.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QTableView>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace kl::app {

TimelinePanel::TimelinePanel(QWidget* parent)
    : QWidget(parent)
    , m_rowModel(new TraceRowModel(this))
    , m_view(new TimelineView(m_rowModel, this))
    , m_rowList(new QTableView(this))
    , m_stats(new QTextBrowser(this))
    , m_title(new QLabel(this))
    , m_progress(new QProgressBar(this))
    , m_cancel(new QPushButton(tr("Cancel"), this))
{
    qRegisterMetaType<kl::app::SelectionStats>();
    setObjectName(QStringLiteral("timelinePanel"));
    m_title->setText(tr("No trace. Open one (Ctrl+T): wheel zooms, drag pans, Shift+drag selects."));
    m_title->setForegroundRole(QPalette::PlaceholderText);
    auto* open = new QPushButton(tr("Open…"), this);
    auto* add = new QPushButton(tr("Add below…"), this);
    add->setToolTip(tr("Load a second trace under the first, e.g. the candidate under the baseline"));
    connect(open, &QPushButton::clicked, this, [this]() { emit openTraceRequested(false); });
    connect(add, &QPushButton::clicked, this, [this]() { emit openTraceRequested(true); });
    m_progress->setRange(0, 1000);
    m_progress->setMaximumWidth(200);
    m_progress->hide();
    m_cancel->hide();
    connect(m_cancel, &QPushButton::clicked, this, &TimelinePanel::cancelLoad);

    auto* header = new QHBoxLayout;
    header->setContentsMargins(6, 2, 6, 2);
    header->addWidget(m_title, 1);
    header->addWidget(m_progress);
    header->addWidget(m_cancel);
    header->addWidget(open);
    header->addWidget(add);

    auto* vbar = new QScrollBar(Qt::Vertical, this);
    m_view->setVerticalScrollBar(vbar);
    auto* viewBox = new QWidget(this);
    auto* viewLayout = new QHBoxLayout(viewBox);
    viewLayout->setContentsMargins(0, 0, 0, 0);
    viewLayout->setSpacing(0);
    viewLayout->addWidget(m_view, 1);
    viewLayout->addWidget(vbar);

    m_rowList->setModel(m_rowModel);
    m_rowList->verticalHeader()->hide();
    m_rowList->horizontalHeader()->setSectionResizeMode(TraceRowModel::NameColumn, QHeaderView::Stretch);
    m_rowList->setShowGrid(false);
    m_rowList->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_rowList->verticalHeader()->setDefaultSectionSize(m_rowList->fontMetrics().height() + 6);
    m_stats->setObjectName(QStringLiteral("selectionStats"));
    m_stats->setPlaceholderText(tr("Shift+drag in the timeline (or drag on the ruler) to select a range."));
    auto* side = new QSplitter(Qt::Vertical, this);
    side->addWidget(m_rowList);
    side->addWidget(m_stats);

    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(viewBox);
    split->addWidget(side);
    split->setStretchFactor(0, 4);
    split->setStretchFactor(1, 1);
    side->setMinimumWidth(260);
    split->setSizes({ 1000, 300 });

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    layout->addLayout(header);
    layout->addWidget(split, 1);

    connect(m_view, &TimelineView::selectionStatsReady, this, [this](const SelectionStats& s) {
        m_stats->setHtml(selectionStatsHtml(s));
        emit selectionChanged(s);
    });
    connect(m_view, &TimelineView::selectionCleared, m_stats, &QTextBrowser::clear);
    connect(&m_watcher, &QFutureWatcher<TraceLoadResult>::finished, this, [this]() {
        m_progress->hide();
        m_cancel->hide();
        const TraceLoadResult r = m_watcher.result();
        if (!r.error.isEmpty()) {
            emit loadFailed(r.error);
            return;
        }
        std::vector<TimelineTrace> traces = m_appendPending ? m_rowModel->traces() : std::vector<TimelineTrace>();
        traces.push_back({ r.label, r.trace });
        setTraces(std::move(traces));
        emit traceLoaded(r.label);
    });
}

TimelinePanel::~TimelinePanel()
{
    cancelLoad();
    m_watcher.waitForFinished();
}

void TimelinePanel::loadTrace(const QString& path, bool append)
{
    cancelLoad();
    m_watcher.waitForFinished();
    m_cancelToken = kl::CancelToken();
    m_appendPending = append;
    m_progress->setValue(0);
    m_progress->show();
    m_cancel->show();
    QPointer<QProgressBar> bar(m_progress);
    kl::prof::ImportOptions opts;
    opts.cancel = m_cancelToken;
    auto lastReported = std::make_shared<std::atomic<int>>(-1);
    opts.progress = [bar, lastReported](double fraction, const std::string&) {
        const int v = static_cast<int>(fraction * 1000);
        // The importer may report per record; the bar needs at most a thousand updates.
        if (v == lastReported->exchange(v))
            return;
        QMetaObject::invokeMethod(
            bar.data(),
            [bar, v]() {
                if (bar)
                    bar->setValue(v);
            },
            Qt::QueuedConnection);
    };
    const QString label = QFileInfo(path).fileName();
    m_watcher.setFuture(QtConcurrent::run([path, label, opts]() {
        TraceLoadResult r;
        r.label = label;
        try {
            r.trace = std::make_shared<const kl::prof::Trace>(kl::prof::importTraceFile(path.toStdString(), opts));
        } catch (const kl::prof::ImportCancelled&) {
            r.error = QObject::tr("Loading %1 was cancelled.").arg(label);
        } catch (const std::exception& e) {
            r.error = QObject::tr("Could not load trace %1: %2").arg(path, QString::fromStdString(e.what()));
        }
        return r;
    }));
}

void TimelinePanel::cancelLoad()
{
    m_cancelToken.cancel();
}

void TimelinePanel::setTraces(std::vector<TimelineTrace> traces)
{
    QStringList labels;
    std::size_t events = 0;
    for (const auto& t : traces) {
        labels << t.label;
        events += t.trace->eventCount();
    }
    m_rowModel->setTraces(std::move(traces));
    m_title->setForegroundRole(QPalette::WindowText);
    m_title->setText(tr("%1 — %2 events. Wheel zooms, drag pans, Shift+drag selects, double-click fits.")
                         .arg(labels.join(QStringLiteral(" / ")))
                         .arg(events));
    m_stats->clear();
    emit tracesChanged();
}

QString TimelinePanel::selectionText() const
{
    return m_stats->toPlainText();
}

} // namespace kl::app
