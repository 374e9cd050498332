#pragma once
// The Workers panel's table: one row per pool worker, from snapshots (kl::PoolSnapshot) taken by whoever owns
// the pool; the model never reaches into a pool or a worker.
#include "kernels/pool/worker_status.h"

#include <QAbstractTableModel>
#include <vector>

namespace kl::app {

class WorkerTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column {
        WorkerColumn,
        StateColumn,
        GpuColumn,
        HostColumn,
        ClocksColumn,
        InFlightColumn,
        EvaluationsColumn,
        LostColumn,
        ErrorColumn,
        ColumnCount
    };
    enum Role { WorkerIdRole = Qt::UserRole + 1 };

    explicit WorkerTableModel(QObject* parent = nullptr);
    // Rows whose worker is unchanged keep their index; a changed row emits dataChanged, a new set resets.
    void setWorkers(std::vector<kl::PoolWorkerStatus> workers);
    const std::vector<kl::PoolWorkerStatus>& workers() const { return m_workers; }
    int rowOf(const QString& workerId) const; // -1 when absent

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<kl::PoolWorkerStatus> m_workers;
};

} // namespace kl::app
