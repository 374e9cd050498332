#pragma once
// The pipeline view's table: one row per stage of one measured shape of a pipeline result (kl::PipelineResult, the
// worker's pipeline reply), with the implementation it ran, its time alone under the graph and its share, its
// baseline, its eager time, whether it captures and whether it is right on the chained reference's inputs.
#include "core/pipeline_result.h"

#include <QAbstractTableModel>

namespace kl::app {

class PipelineStageModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column {
        StageColumn,
        ProblemColumn,
        ImplColumn,
        TimeColumn,
        ShareColumn,
        BaselineColumn,
        EagerColumn,
        CaptureColumn,
        CheckColumn,
        ColumnCount
    };
    enum Role {
        ShareRole = Qt::UserRole + 1, // double in [0, 1]
        DiffersRole, // bool: a candidate or the reference, not the baseline
        FailedRole, // bool: the stage breaks capture or is wrong
    };

    explicit PipelineStageModel(QObject* parent = nullptr);
    // Rows of the same stages keep their index and emit dataChanged; other stages reset the model.
    void setStages(std::vector<kl::PipelineStageResult> stages);
    const std::vector<kl::PipelineStageResult>& stages() const { return m_stages; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<kl::PipelineStageResult> m_stages;
};

} // namespace kl::app
