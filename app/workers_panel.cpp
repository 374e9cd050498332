#include "app/workers_panel.h"

#include "app/models/worker_table_model.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

namespace kl::app {

WorkersPanel::WorkersPanel(QWidget* parent)
    : QWidget(parent)
    , m_model(new WorkerTableModel(this))
    , m_view(new QTableView(this))
    , m_summary(new QLabel(this))
    , m_timer(new QTimer(this))
{
    setObjectName(QStringLiteral("workersPanel"));
    m_view->setObjectName(QStringLiteral("workersTable"));
    m_view->setModel(m_model);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setAlternatingRowColors(true);
    m_view->verticalHeader()->hide();
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_view->horizontalHeader()->setSectionResizeMode(WorkerTableModel::ErrorColumn, QHeaderView::Stretch);
    m_summary->setObjectName(QStringLiteral("workersSummary"));
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_summary);
    layout->addWidget(m_view, 1);
    m_timer->setInterval(kRefreshMs);
    connect(m_timer, &QTimer::timeout, this, &WorkersPanel::refresh);
    clear();
}

void WorkersPanel::setLiveSource(Source source)
{
    m_source = std::move(source);
    refresh();
}

void WorkersPanel::followSession(const QString& directory)
{
    m_sessionDir = directory;
    refresh();
}

void WorkersPanel::setSession(const SessionSnapshot& session)
{
    m_session = session;
    if (!m_source && !m_timer->isActive())
        refresh();
}

void WorkersPanel::clear()
{
    m_source = nullptr;
    m_sessionDir.clear();
    m_session.reset();
    refresh();
}

QString WorkersPanel::summary() const
{
    return m_summary->text();
}

void WorkersPanel::show(const kl::PoolSnapshot& pool, const QString& origin)
{
    m_model->setWorkers(pool.workers);
    int busy = 0;
    int down = 0;
    for (const auto& w : pool.workers) {
        busy += w.state == "busy";
        down += w.state == "lost" || w.state == "unavailable";
    }
    QString line = tr("%n worker(s), ", nullptr, static_cast<int>(pool.workers.size()))
        + tr("%1 busy, %2 lost or unavailable, %3 waiting for a free worker").arg(busy).arg(down).arg(pool.waiting);
    m_summary->setText(origin.isEmpty() ? line : line + QStringLiteral(" (") + origin + QStringLiteral(")"));
}

void WorkersPanel::refresh()
{
    if (m_source) {
        show(m_source(), QString());
        m_timer->start();
        return;
    }
    QString problem;
    if (!m_sessionDir.isEmpty()) {
        m_timer->start(); // the run may write (and rewrites) its snapshot later
        try {
            if (auto pool = kl::readPoolStatus(m_sessionDir.toStdString())) {
                show(*pool, tr("as kloop run last wrote it"));
                return;
            }
        } catch (const std::exception& e) {
            problem = QString::fromStdString(e.what()); // said, and the journal's counts still show
        }
    } else {
        m_timer->stop();
    }
    kl::PoolSnapshot recorded;
    if (m_session)
        recorded.workers = kl::workersFromMeasurements(*m_session);
    if (!recorded.workers.empty()) {
        show(recorded, tr("counted from the journal's measured_on"));
    } else {
        m_model->setWorkers({});
        m_summary->setText(tr("No worker has measured anything in this session yet."));
    }
    if (!problem.isEmpty())
        m_summary->setText(m_summary->text() + QStringLiteral("; ") + problem);
}

} // namespace kl::app
