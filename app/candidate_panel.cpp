#include "app/candidate_panel.h"

#include "app/models/candidate_tree_model.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLineEdit>
#include <QMenu>
#include <QSortFilterProxyModel>
#include <QTreeView>
#include <QVBoxLayout>
#include <algorithm>

namespace kl::app {

namespace {

    // Filters on text and on a status group while keeping the ancestors of every match visible.
    class CandidateFilterProxy : public QSortFilterProxyModel {
    public:
        using QSortFilterProxyModel::QSortFilterProxyModel;
        enum class Group { All, Accepted, Failed, Pending };
        void setGroup(Group g)
        {
            m_group = g;
            invalidateFilter();
        }

    protected:
        bool filterAcceptsRow(int row, const QModelIndex& parent) const override
        {
            const QModelIndex idx = sourceModel()->index(row, 0, parent);
            const auto status = static_cast<kl::CandidateStatus>(idx.data(CandidateTreeModel::StatusRole).toInt());
            bool groupOk = true;
            switch (m_group) {
            case Group::All:
                break;
            case Group::Accepted:
                groupOk = status == kl::CandidateStatus::Accepted;
                break;
            case Group::Failed:
                groupOk = kl::isTerminal(status) && status != kl::CandidateStatus::Accepted;
                break;
            case Group::Pending:
                groupOk = !kl::isTerminal(status);
                break;
            }
            return groupOk && QSortFilterProxyModel::filterAcceptsRow(row, parent);
        }

    private:
        Group m_group = Group::All;
    };

} // namespace

CandidatePanel::CandidatePanel(QWidget* parent)
    : QWidget(parent)
    , m_model(new CandidateTreeModel(this))
    , m_proxy(new CandidateFilterProxy(this))
    , m_view(new QTreeView(this))
    , m_filter(new QLineEdit(this))
    , m_statusFilter(new QComboBox(this))
{
    setObjectName(QStringLiteral("candidatePanel"));
    m_proxy->setSourceModel(m_model);
    m_proxy->setRecursiveFilteringEnabled(true);
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_proxy->setFilterKeyColumn(-1);
    m_proxy->setSortRole(CandidateTreeModel::SortRole);

    m_filter->setPlaceholderText(tr("Filter candidates (id, status, author, hypothesis)…"));
    m_filter->setClearButtonEnabled(true);
    m_statusFilter->addItems({ tr("All"), tr("Accepted"), tr("Failed"), tr("In flight") });
    connect(m_filter, &QLineEdit::textChanged, m_proxy, &QSortFilterProxyModel::setFilterFixedString);
    connect(m_statusFilter, &QComboBox::currentIndexChanged, this, [this](int i) {
        static_cast<CandidateFilterProxy*>(m_proxy)->setGroup(static_cast<CandidateFilterProxy::Group>(i));
    });

    m_view->setObjectName(QStringLiteral("candidateTree"));
    m_view->setModel(m_proxy);
    m_view->setUniformRowHeights(true);
    m_view->setIndentation(14);
    m_view->setAlternatingRowColors(true);
    m_view->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setContextMenuPolicy(Qt::CustomContextMenu);
    m_view->setSortingEnabled(false);
    m_view->header()->setStretchLastSection(false);
    m_view->header()->setSectionResizeMode(CandidateTreeModel::HypothesisColumn, QHeaderView::Stretch);
    m_view->setColumnWidth(CandidateTreeModel::IdColumn, 170);
    m_view->setColumnWidth(CandidateTreeModel::StatusColumn, 120);
    m_view->setColumnWidth(CandidateTreeModel::AuthorColumn, 90);
    m_view->setColumnWidth(CandidateTreeModel::LatencyColumn, 74);
    m_view->setColumnWidth(CandidateTreeModel::SpeedupColumn, 60);
    m_view->header()->moveSection(CandidateTreeModel::LatencyColumn, CandidateTreeModel::AuthorColumn);
    m_view->header()->moveSection(CandidateTreeModel::SpeedupColumn, CandidateTreeModel::AuthorColumn + 1);
    connect(m_view, &QTreeView::customContextMenuRequested, this, &CandidatePanel::showContextMenu);
    connect(
        m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
            emit currentCandidateChanged(current.data(CandidateTreeModel::CandidateIdRole).toString());
        });
    // New children of an expanded node should be visible as they arrive.
    connect(m_proxy, &QAbstractItemModel::rowsInserted, this, [this](const QModelIndex& insertedUnder) {
        if (insertedUnder.isValid())
            m_view->expand(insertedUnder);
    });

    auto* filterRow = new QHBoxLayout;
    filterRow->setContentsMargins(4, 4, 4, 0);
    filterRow->addWidget(m_filter, 1);
    filterRow->addWidget(m_statusFilter);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(4);
    layout->addLayout(filterRow);
    layout->addWidget(m_view, 1);
}

void CandidatePanel::setSession(const SessionSnapshot& s)
{
    const bool wasEmpty = m_model->rowCount() == 0;
    m_model->setSession(s);
    if (wasEmpty && m_model->rowCount() > 0) {
        m_view->expandAll();
        fitIdColumn();
    }
}

void CandidatePanel::fitIdColumn()
{
    // Once per load, not per snapshot: sizing to contents visits every row.
    m_view->resizeColumnToContents(CandidateTreeModel::IdColumn);
    m_view->setColumnWidth(
        CandidateTreeModel::IdColumn, std::clamp(m_view->columnWidth(CandidateTreeModel::IdColumn), 120, 240));
}

QString CandidatePanel::currentCandidate() const
{
    return m_view->currentIndex().data(CandidateTreeModel::CandidateIdRole).toString();
}

QStringList CandidatePanel::selectedCandidates() const
{
    QStringList ids;
    for (const QModelIndex& idx : m_view->selectionModel()->selectedRows())
        ids << idx.data(CandidateTreeModel::CandidateIdRole).toString();
    ids.sort();
    return ids;
}

void CandidatePanel::selectCandidate(const QString& id)
{
    const QModelIndex source = m_model->indexOf(id);
    const QModelIndex idx = m_proxy->mapFromSource(source);
    if (!idx.isValid())
        return;
    m_view->scrollTo(idx);
    m_view->selectionModel()->setCurrentIndex(idx, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
}

void CandidatePanel::showContextMenu(const QPoint& pos)
{
    const QModelIndex idx = m_view->indexAt(pos);
    if (!idx.isValid())
        return;
    const QString id = idx.data(CandidateTreeModel::CandidateIdRole).toString();
    QMenu menu(this);
    const QStringList selected = selectedCandidates();
    if (selected.size() == 2) {
        menu.addAction(tr("Compare %1 with %2").arg(selected[0], selected[1]), this,
            [this, selected]() { emit compareRequested(selected[0], selected[1]); });
    }
    menu.addAction(tr("Branch from %1").arg(id), this, [this, id]() { emit branchRequested(id); });
    menu.addAction(tr("Export %1…").arg(id), this, [this, id]() { emit exportRequested(id); });
    menu.exec(m_view->viewport()->mapToGlobal(pos));
}

} // namespace kl::app
