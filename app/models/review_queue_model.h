#pragma once
// What waits for the engineer: agent diffs pending review, and referee flags (non-blocking verdict
// reasons) on candidates nobody has decided on yet.
#include "app/app_types.h"

#include <QAbstractTableModel>
#include <string>
#include <vector>

namespace kl::app {

struct ReviewItem {
    enum class Kind { Diff, Flag };
    Kind kind = Kind::Diff;
    std::string candidateId;
    std::string author;
    std::string what; // the hypothesis / agent note, or the flag's rule and message
    std::int64_t sinceMs = 0;
    bool operator==(const ReviewItem& o) const
    {
        return kind == o.kind && candidateId == o.candidateId && what == o.what && author == o.author;
    }
};

std::vector<ReviewItem> reviewItems(const kl::Session& s);

class ReviewQueueModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { CandidateColumn, KindColumn, AuthorColumn, WhatColumn, ColumnCount };
    enum Role { CandidateIdRole = Qt::UserRole + 1 };

    explicit ReviewQueueModel(QObject* parent = nullptr);
    void setSession(const SessionSnapshot& session);
    const std::vector<ReviewItem>& items() const { return m_items; }
    QString candidateIdAt(int row) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<ReviewItem> m_items;
};

} // namespace kl::app
