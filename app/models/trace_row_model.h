#pragma once
// The rows of one or more traces (a baseline and a candidate capture can be shown one above the
// other), each checkable to show or hide it in the timeline.
#include "profiler/trace.h"

#include <QAbstractTableModel>
#include <QString>
#include <memory>
#include <vector>

namespace kl::app {

struct TimelineTrace {
    QString label; // "baseline", "c0012", or the file name
    std::shared_ptr<const kl::prof::Trace> trace;
};

struct VisualRow {
    int trace = 0;
    std::uint32_t row = 0;
    int lanes = 1;
    bool gpu = false;
    bool visible = true;
    QString name;
    std::size_t events = 0;
    std::int64_t busyNs = 0; // kl::prof::Trace::busyNs: GPU work only on a stream, top-level slices on a thread
};

class TraceRowModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { NameColumn, EventsColumn, BusyColumn, ColumnCount };

    explicit TraceRowModel(QObject* parent = nullptr);

    void setTraces(std::vector<TimelineTrace> traces);
    const std::vector<TimelineTrace>& traces() const { return m_traces; }
    const std::vector<VisualRow>& rows() const { return m_rows; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<TimelineTrace> m_traces;
    std::vector<VisualRow> m_rows;
};

QString formatDurationNs(double ns);

} // namespace kl::app
