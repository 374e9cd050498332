#pragma once
// The candidate tree dock: a filterable tree over CandidateTreeModel with branch and compare actions.
#include "app/app_types.h"

#include <QWidget>

class QLineEdit;
class QComboBox;
class QSortFilterProxyModel;
class QTreeView;

namespace kl::app {

class CandidateTreeModel;

class CandidatePanel : public QWidget {
    Q_OBJECT
public:
    explicit CandidatePanel(QWidget* parent = nullptr);

    CandidateTreeModel* model() const { return m_model; }
    QTreeView* view() const { return m_view; }
    void setSession(const SessionSnapshot& s);
    QString currentCandidate() const;
    QStringList selectedCandidates() const; // in tree order
    void selectCandidate(const QString& id);
    void fitIdColumn();

signals:
    void currentCandidateChanged(const QString& id);
    void compareRequested(const QString& a, const QString& b);
    void branchRequested(const QString& id);
    void exportRequested(const QString& id);

private:
    void showContextMenu(const QPoint& pos);

    CandidateTreeModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QTreeView* m_view;
    QLineEdit* m_filter;
    QComboBox* m_statusFilter;
    bool m_autoExpanded = false;
};

} // namespace kl::app
