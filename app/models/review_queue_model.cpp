#include "app/models/review_queue_model.h"

#include "app/models/session_metrics.h"
#include "app/theme.h"

#include <set>

namespace kl::app {

std::vector<ReviewItem> reviewItems(const kl::Session& s)
{
    std::set<std::string> decided;
    for (const auto& r : s.reviews)
        decided.insert(r.candidateId);
    std::vector<ReviewItem> items;
    for (const auto& id : s.tree.order()) {
        if (decided.count(id))
            continue;
        const auto& c = s.tree.at(id);
        if (c.status == kl::CandidateStatus::PendingReview) {
            ReviewItem item;
            item.kind = ReviewItem::Kind::Diff;
            item.candidateId = id;
            item.author = authorText(c).toStdString();
            const auto h = s.hypotheses.find(c.hypothesisId);
            item.what = !c.statusReason.empty() ? c.statusReason : (h != s.hypotheses.end() ? h->second.text : "");
            item.sinceMs = c.createdMs;
            items.push_back(std::move(item));
        }
        const auto e = s.evaluations.find(id);
        if (e == s.evaluations.end())
            continue;
        // A flag on a candidate that lost anyway needs no decision.
        if (c.status != kl::CandidateStatus::Accepted && c.status != kl::CandidateStatus::PendingReview)
            continue;
        for (const auto& reason : e->second.reasons) {
            if (!kl::isReviewFlag(reason))
                continue;
            ReviewItem item;
            item.kind = ReviewItem::Kind::Flag;
            item.candidateId = id;
            item.author = authorText(c).toStdString();
            item.what = reason.rule + ": " + reason.message;
            item.sinceMs = e->second.finishedMs;
            items.push_back(std::move(item));
        }
    }
    return items;
}

ReviewQueueModel::ReviewQueueModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void ReviewQueueModel::setSession(const SessionSnapshot& session)
{
    std::vector<ReviewItem> items = session ? reviewItems(*session) : std::vector<ReviewItem>();
    if (items == m_items)
        return;
    beginResetModel();
    m_items = std::move(items);
    endResetModel();
}

QString ReviewQueueModel::candidateIdAt(int row) const
{
    if (row < 0 || row >= static_cast<int>(m_items.size()))
        return {};
    return QString::fromStdString(m_items[row].candidateId);
}

int ReviewQueueModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_items.size());
}

int ReviewQueueModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ReviewQueueModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= static_cast<int>(m_items.size()))
        return {};
    const ReviewItem& item = m_items[index.row()];
    if (role == CandidateIdRole)
        return QString::fromStdString(item.candidateId);
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case CandidateColumn:
            return QString::fromStdString(item.candidateId);
        case KindColumn:
            return item.kind == ReviewItem::Kind::Diff ? tr("diff") : tr("referee flag");
        case AuthorColumn:
            return QString::fromStdString(item.author);
        case WhatColumn:
            return firstLine(item.what, 120);
        default:
            return {};
        }
    }
    if (role == Qt::ToolTipRole && index.column() == WhatColumn)
        return QString::fromStdString(item.what);
    if (role == Qt::ForegroundRole && index.column() == KindColumn)
        return item.kind == ReviewItem::Kind::Diff ? theme().warn : theme().info;
    return {};
}

QVariant ReviewQueueModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case CandidateColumn:
        return tr("Candidate");
    case KindColumn:
        return tr("Kind");
    case AuthorColumn:
        return tr("Author");
    case WhatColumn:
        return tr("What");
    default:
        return {};
    }
}

} // namespace kl::app
