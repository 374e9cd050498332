#include "app/models/worker_table_model.h"

#include "app/theme.h"

#include <QColor>

namespace kl::app {

namespace {

    QString text(const std::string& s)
    {
        return QString::fromStdString(s);
    }

    QString stateText(const kl::PoolWorkerStatus& w)
    {
        if (w.state == "lost" && w.reconnectInSeconds > 0)
            return QObject::tr("lost (reconnect in %1 s)").arg(w.reconnectInSeconds, 0, 'f', 0);
        return text(w.state);
    }

    QString clocksText(const kl::PoolWorkerStatus& w)
    {
        if (w.smClockMHz <= 0)
            return {};
        return w.memClockMHz > 0 ? QObject::tr("%1 / %2 MHz").arg(w.smClockMHz).arg(w.memClockMHz)
                                 : QObject::tr("%1 MHz").arg(w.smClockMHz);
    }

    QString hostText(const kl::PoolWorkerStatus& w)
    {
        if (w.host.empty())
            return text(w.transport);
        return w.pid > 0 ? QStringLiteral("%1 (%2, pid %3)").arg(text(w.host), text(w.transport)).arg(w.pid)
                         : QStringLiteral("%1 (%2)").arg(text(w.host), text(w.transport));
    }

} // namespace

WorkerTableModel::WorkerTableModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void WorkerTableModel::setWorkers(std::vector<kl::PoolWorkerStatus> workers)
{
    const bool sameRows = workers.size() == m_workers.size()
        && std::equal(workers.begin(), workers.end(), m_workers.begin(),
            [](const auto& a, const auto& b) { return a.id == b.id; });
    if (!sameRows) {
        beginResetModel();
        m_workers = std::move(workers);
        endResetModel();
        return;
    }
    for (std::size_t i = 0; i < workers.size(); ++i) {
        if (workers[i] == m_workers[i])
            continue;
        m_workers[i] = std::move(workers[i]);
        const int row = static_cast<int>(i);
        emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
    }
}

int WorkerTableModel::rowOf(const QString& workerId) const
{
    for (std::size_t i = 0; i < m_workers.size(); ++i)
        if (text(m_workers[i].id) == workerId)
            return static_cast<int>(i);
    return -1;
}

int WorkerTableModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_workers.size());
}

int WorkerTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant WorkerTableModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= static_cast<int>(m_workers.size()) || index.column() >= ColumnCount)
        return {};
    const kl::PoolWorkerStatus& w = m_workers[static_cast<std::size_t>(index.row())];
    if (role == WorkerIdRole)
        return text(w.id);
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case WorkerColumn:
            return text(w.id);
        case StateColumn:
            return stateText(w);
        case GpuColumn:
            return w.arch.empty() ? text(w.gpu) : QStringLiteral("%1 (%2)").arg(text(w.gpu), text(w.arch));
        case HostColumn:
            return hostText(w);
        case ClocksColumn:
            return clocksText(w);
        case InFlightColumn:
            return text(w.candidate);
        case EvaluationsColumn:
            return w.evaluations;
        case LostColumn:
            return w.lost;
        case ErrorColumn:
            return text(w.lastError);
        default:
            return {};
        }
    }
    if (role == Qt::ToolTipRole) {
        if (index.column() == ErrorColumn || index.column() == StateColumn)
            return w.lastError.empty() ? QVariant() : QVariant(text(w.lastError));
        if (index.column() == GpuColumn && !w.uuid.empty())
            return text(w.uuid);
        return {};
    }
    if (role == Qt::ForegroundRole && index.column() == StateColumn) {
        if (w.state == "lost" || w.state == "unavailable")
            return theme().bad;
        if (w.state == "busy")
            return theme().info;
        return {};
    }
    if (role == Qt::TextAlignmentRole
        && (index.column() == EvaluationsColumn || index.column() == LostColumn || index.column() == ClocksColumn))
        return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

QVariant WorkerTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case WorkerColumn:
        return tr("Worker");
    case StateColumn:
        return tr("State");
    case GpuColumn:
        return tr("GPU");
    case HostColumn:
        return tr("Host");
    case ClocksColumn:
        return tr("Clocks (SM / mem)");
    case InFlightColumn:
        return tr("In flight");
    case EvaluationsColumn:
        return tr("Evaluations");
    case LostColumn:
        return tr("Lost");
    case ErrorColumn:
        return tr("Last error");
    default:
        return {};
    }
}

} // namespace kl::app
