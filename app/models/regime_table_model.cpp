#include "app/models/regime_table_model.h"

#include "app/theme.h"

namespace kl::app {

namespace {

    QString text(const std::string& s)
    {
        return QString::fromStdString(s);
    }

    bool sameRow(const kl::RegimeWinner& a, const kl::RegimeWinner& b)
    {
        return a.winner == b.winner && a.result.objective == b.result.objective
            && a.result.objectiveCiLow == b.result.objectiveCiLow
            && a.result.objectiveCiHigh == b.result.objectiveCiHigh
            && a.result.verifiedShapes == b.result.verifiedShapes && a.condition == b.condition;
    }

} // namespace

RegimeTableModel::RegimeTableModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void RegimeTableModel::setSession(const SessionSnapshot& s)
{
    std::vector<kl::RegimeWinner> rows = s ? kl::regimeWinners(*s) : std::vector<kl::RegimeWinner> {};
    const bool sameRegimes = rows.size() == m_rows.size()
        && std::equal(rows.begin(), rows.end(), m_rows.begin(),
            [](const auto& a, const auto& b) { return a.regime == b.regime; });
    if (!sameRegimes) {
        beginResetModel();
        m_rows = std::move(rows);
        endResetModel();
        return;
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
        if (sameRow(rows[i], m_rows[i]))
            continue;
        m_rows[i] = std::move(rows[i]);
        const int row = static_cast<int>(i);
        emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
    }
}

int RegimeTableModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int RegimeTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant RegimeTableModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= static_cast<int>(m_rows.size()) || index.column() >= ColumnCount)
        return {};
    const kl::RegimeWinner& w = m_rows[static_cast<std::size_t>(index.row())];
    if (role == CandidateIdRole)
        return w.winner ? text(*w.winner) : QString();
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case RegimeColumn:
            return text(w.regime);
        case ConditionColumn:
            return text(w.condition);
        case WinnerColumn:
            return w.winner ? text(*w.winner) : tr("none: the fallback");
        case SpeedupColumn:
            if (!w.winner)
                return QString();
            return QStringLiteral("%1x [%2, %3]")
                .arg(w.result.objective, 0, 'f', 3)
                .arg(w.result.objectiveCiLow, 0, 'f', 3)
                .arg(w.result.objectiveCiHigh, 0, 'f', 3);
        case VerifiedColumn:
            return w.winner ? QVariant(w.result.verifiedShapes) : QVariant();
        default:
            return {};
        }
    }
    if (role == Qt::ForegroundRole && index.column() == WinnerColumn && !w.winner)
        return theme().mutedText;
    if (role == Qt::ToolTipRole && index.column() == SpeedupColumn && w.winner)
        return tr("speedup over the baseline on the regime's %1 timed shapes, 95% interval").arg(w.result.timedShapes);
    if (role == Qt::TextAlignmentRole && (index.column() == SpeedupColumn || index.column() == VerifiedColumn))
        return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

QVariant RegimeTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case RegimeColumn:
        return tr("Regime");
    case ConditionColumn:
        return tr("Condition");
    case WinnerColumn:
        return tr("Winner");
    case SpeedupColumn:
        return tr("Speedup (95% CI)");
    case VerifiedColumn:
        return tr("Verified shapes");
    default:
        return {};
    }
}

} // namespace kl::app
