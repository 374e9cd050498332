#include "app/models/trace_row_model.h"

#include <algorithm>

namespace kl::app {

QString formatDurationNs(double ns)
{
    const double a = std::abs(ns);
    if (a >= 1e9)
        return QStringLiteral("%1 s").arg(ns / 1e9, 0, 'f', 3);
    if (a >= 1e6)
        return QStringLiteral("%1 ms").arg(ns / 1e6, 0, 'f', a >= 1e8 ? 1 : 3);
    if (a >= 1e3)
        return QStringLiteral("%1 µs").arg(ns / 1e3, 0, 'f', a >= 1e5 ? 1 : 2);
    return QStringLiteral("%1 ns").arg(ns, 0, 'f', 0);
}

TraceRowModel::TraceRowModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void TraceRowModel::setTraces(std::vector<TimelineTrace> traces)
{
    beginResetModel();
    m_traces = std::move(traces);
    m_rows.clear();
    for (int t = 0; t < static_cast<int>(m_traces.size()); ++t) {
        const auto& trace = *m_traces[t].trace;
        std::vector<VisualRow> rows;
        for (std::uint32_t r = 0; r < trace.rows().size(); ++r) {
            const auto& row = trace.rows()[r];
            VisualRow v;
            v.trace = t;
            v.row = r;
            v.lanes = std::max<int>(1, static_cast<int>(row.lanes.size()));
            v.gpu = row.kind == kl::prof::RowKind::GpuStream;
            v.name = QString::fromUtf8(
                trace.strings().view(row.name).data(), static_cast<int>(trace.strings().view(row.name).size()));
            if (m_traces.size() > 1)
                v.name = m_traces[t].label + QStringLiteral(" · ") + v.name;
            for (const auto& lane : row.lanes)
                v.events += lane.size();
            v.busyNs = trace.busyNs(r);
            rows.push_back(std::move(v));
        }
        // GPU streams first (where kernels run), then CPU threads; both in the trace's own order.
        std::stable_sort(
            rows.begin(), rows.end(), [](const VisualRow& a, const VisualRow& b) { return a.gpu > b.gpu; });
        m_rows.insert(m_rows.end(), rows.begin(), rows.end());
    }
    endResetModel();
}

int TraceRowModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int TraceRowModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant TraceRowModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= static_cast<int>(m_rows.size()))
        return {};
    const VisualRow& r = m_rows[index.row()];
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case NameColumn:
            return r.name;
        case EventsColumn:
            return static_cast<qulonglong>(r.events);
        case BusyColumn:
            return formatDurationNs(static_cast<double>(r.busyNs));
        default:
            return {};
        }
    }
    if (role == Qt::CheckStateRole && index.column() == NameColumn)
        return r.visible ? Qt::Checked : Qt::Unchecked;
    if (role == Qt::TextAlignmentRole && index.column() != NameColumn)
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

bool TraceRowModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (!index.isValid() || role != Qt::CheckStateRole || index.column() != NameColumn)
        return false;
    m_rows[index.row()].visible = value.toInt() == Qt::Checked;
    emit dataChanged(index, index, { Qt::CheckStateRole });
    return true;
}

Qt::ItemFlags TraceRowModel::flags(const QModelIndex& index) const
{
    if (!index.isValid())
        return Qt::NoItemFlags;
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
    if (index.column() == NameColumn)
        f |= Qt::ItemIsUserCheckable;
    return f;
}

QVariant TraceRowModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case NameColumn:
        return tr("Row");
    case EventsColumn:
        return tr("Events");
    case BusyColumn:
        return tr("Busy");
    default:
        return {};
    }
}

} // namespace kl::app
