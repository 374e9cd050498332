#pragma once
// The Regimes table: each shape regime of the session (problem.json "regimes") with its best candidate, that
// candidate's speedup over the baseline on the regime's tuning shapes (95% interval) and how many of the regime's
// shapes it was verified on. Rows come from core's regimeWinners, as kloop session show prints them.
#include "app/app_types.h"
#include "core/current_best.h"

#include <QAbstractTableModel>
#include <vector>

namespace kl::app {

class RegimeTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { RegimeColumn, ConditionColumn, WinnerColumn, SpeedupColumn, VerifiedColumn, ColumnCount };
    enum Role { CandidateIdRole = Qt::UserRole + 1 }; // the winner's id; empty without one

    explicit RegimeTableModel(QObject* parent = nullptr);
    // The same regimes keep their rows (a new winner emits dataChanged); a different set resets the model.
    void setSession(const SessionSnapshot& s);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<kl::RegimeWinner> m_rows;
};

} // namespace kl::app
