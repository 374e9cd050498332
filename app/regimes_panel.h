#pragma once
// The Regimes panel: the session's regimes with their winners (RegimeTableModel), and under them what the session's
// per-shape measurements say about the regimes themselves: where the per-shape winners change and what a best per
// learned regime would give over one configuration (core's learnRegimes, as `kloop session regimes` prints it).
#include "app/app_types.h"

#include <QString>
#include <QWidget>
#include <optional>

class QLabel;
class QTableView;

namespace kl::app {

class RegimeTableModel;

class RegimesPanel : public QWidget {
    Q_OBJECT
public:
    explicit RegimesPanel(QWidget* parent = nullptr);
    void setProblem(const std::optional<kl::Problem>& problem); // none: no suggestion
    void setSession(const SessionSnapshot& session);

    RegimeTableModel* model() const { return m_model; }
    QTableView* view() const { return m_view; }
    QString suggestion() const; // the line under the table; empty while there is nothing to learn from

signals:
    void candidateActivated(const QString& id); // a click on a regime's winner

private:
    void updateSuggestion();

    RegimeTableModel* m_model;
    QTableView* m_view;
    QLabel* m_suggestion;
    std::optional<kl::Problem> m_problem;
    SessionSnapshot m_session;
};

} // namespace kl::app
