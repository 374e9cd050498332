#pragma once
// The candidates of a session as a Qt tree. Fed whole snapshots; because candidates are never removed,
// a newer snapshot of the same session becomes row insertions plus dataChanged, so selection and
// expansion survive live updates.
#include "app/app_types.h"

#include <QAbstractItemModel>
#include <string>
#include <unordered_map>
#include <vector>

namespace kl::app {

class CandidateTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column { IdColumn, StatusColumn, AuthorColumn, HypothesisColumn, LatencyColumn, SpeedupColumn, ColumnCount };
    enum Role {
        CandidateIdRole = Qt::UserRole + 1, // QString
        SortRole, // numbers for the numeric columns
        StatusRole, // int(kl::CandidateStatus)
        IsBestRole, // bool
        IsHeadRole, // bool
    };

    explicit CandidateTreeModel(QObject* parent = nullptr);

    void setSession(SessionSnapshot session);
    const SessionSnapshot& session() const { return m_session; }

    QModelIndex indexOf(const QString& candidateId, int column = IdColumn) const;
    QString candidateIdAt(const QModelIndex& index) const;

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    struct Node {
        std::string id;
        std::size_t signature = 0; // hash of what the row shows; dataChanged only when it changes
        int parent = -1; // index into m_nodes, -1 for a root
        int row = 0;
        std::vector<int> children;
    };

    void rebuild();
    void appendNode(const kl::Candidate& c);
    QModelIndex indexForNode(int node, int column) const;
    std::size_t rowSignature(const std::string& id) const;

    SessionSnapshot m_session;
    std::string m_bestId;
    std::vector<Node> m_nodes;
    std::vector<int> m_roots;
    std::unordered_map<std::string, int> m_byId;
};

} // namespace kl::app
