#include "app/models/pipeline_stage_model.h"

#include <QColor>

namespace kl::app {

namespace {
    QString us(const std::optional<kl::TimingStats>& t)
    {
        return t ? QStringLiteral("%1 us").arg(t->medianUs, 0, 'f', 2) : QString();
    }

    bool failed(const kl::PipelineStageResult& s)
    {
        return !s.captured || (s.check && !s.check->passed);
    }
} // namespace

PipelineStageModel::PipelineStageModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void PipelineStageModel::setStages(std::vector<kl::PipelineStageResult> stages)
{
    const bool sameRows = stages.size() == m_stages.size()
        && std::equal(stages.begin(), stages.end(), m_stages.begin(),
            [](const auto& a, const auto& b) { return a.stage == b.stage; });
    if (!sameRows) {
        beginResetModel();
        m_stages = std::move(stages);
        endResetModel();
        return;
    }
    m_stages = std::move(stages);
    if (!m_stages.empty())
        emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
}

int PipelineStageModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_stages.size());
}

int PipelineStageModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant PipelineStageModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount)
        return {};
    const kl::PipelineStageResult& s = m_stages[static_cast<std::size_t>(index.row())];
    switch (role) {
    case ShareRole:
        return s.share;
    case DiffersRole:
        return s.differsFromBaseline;
    case FailedRole:
        return failed(s);
    case Qt::ForegroundRole:
        if ((index.column() == CaptureColumn && !s.captured)
            || (index.column() == CheckColumn && s.check && !s.check->passed))
            return QColor(0xc6, 0x28, 0x28);
        return {};
    case Qt::ToolTipRole:
        if (index.column() == CaptureColumn && !s.captured)
            return QString::fromStdString(s.captureError);
        return {};
    case Qt::DisplayRole:
        break;
    default:
        return {};
    }
    switch (index.column()) {
    case StageColumn:
        return QString::fromStdString(s.stage);
    case ProblemColumn:
        return QString::fromStdString(s.problem);
    case ImplColumn:
        return QString::fromStdString(s.impl);
    case TimeColumn:
        return us(s.graph ? s.graph : s.eager);
    case ShareColumn:
        return QStringLiteral("%1%").arg(100.0 * s.share, 0, 'f', 1);
    case BaselineColumn:
        return us(s.baselineGraph ? s.baselineGraph : s.baselineEager);
    case EagerColumn:
        return us(s.eager);
    case CaptureColumn:
        return s.captured ? tr("yes") : tr("fails");
    case CheckColumn:
        if (!s.check)
            return tr("not checked");
        return s.check->passed ? tr("passes") : tr("wrong");
    default:
        return {};
    }
}

QVariant PipelineStageModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case StageColumn:
        return tr("Stage");
    case ProblemColumn:
        return tr("Problem");
    case ImplColumn:
        return tr("Runs");
    case TimeColumn:
        return tr("Time (graph)");
    case ShareColumn:
        return tr("Share");
    case BaselineColumn:
        return tr("Baseline");
    case EagerColumn:
        return tr("Eager");
    case CaptureColumn:
        return tr("Captures");
    case CheckColumn:
        return tr("Check");
    default:
        return {};
    }
}

} // namespace kl::app
