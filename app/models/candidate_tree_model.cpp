#include "app/models/candidate_tree_model.h"

#include "app/models/session_metrics.h"
#include "app/theme.h"

#include <QFont>

namespace kl::app {

namespace {
    // The colour and dot of what the candidate is shown as: the measured baseline is a reference, not a
    // rejection.
    kl::CandidateStatus shownStatus(const kl::Candidate& c)
    {
        return kl::displayState(c) == statusName(c.status) ? c.status : kl::CandidateStatus::Approved;
    }
} // namespace

CandidateTreeModel::CandidateTreeModel(QObject* parent)
    : QAbstractItemModel(parent)
{
}

void CandidateTreeModel::setSession(SessionSnapshot session)
{
    const bool sameSession = m_session && session && m_session->id == session->id;
    bool compatible = sameSession;
    if (compatible) {
        for (const auto& node : m_nodes) {
            if (!session->tree.contains(node.id)) {
                compatible = false;
                break;
            }
        }
    }
    if (!compatible) {
        beginResetModel();
        m_session = std::move(session);
        rebuild();
        endResetModel();
        return;
    }

    m_session = std::move(session);
    const auto best = bestCandidate(*m_session);
    m_bestId = best ? *best : std::string();
    const int knownNodes = static_cast<int>(m_nodes.size());
    for (const auto& id : m_session->tree.order()) {
        if (m_byId.count(id))
            continue;
        const auto& c = m_session->tree.at(id);
        const auto parentIt = m_byId.find(c.parentId);
        const QModelIndex parentIndex
            = parentIt == m_byId.end() ? QModelIndex() : indexForNode(parentIt->second, IdColumn);
        const int row = parentIt == m_byId.end() ? static_cast<int>(m_roots.size())
                                                 : static_cast<int>(m_nodes[parentIt->second].children.size());
        beginInsertRows(parentIndex, row, row);
        appendNode(c);
        endInsertRows();
    }
    // Status, latency and best-ness of existing rows may have changed; tell the views only about those rows,
    // since a replay sends many snapshots and most rows stay as they are.
    for (int n = 0; n < knownNodes; ++n) {
        const std::size_t signature = rowSignature(m_nodes[n].id);
        if (signature == m_nodes[n].signature)
            continue;
        m_nodes[n].signature = signature;
        emit dataChanged(indexForNode(n, 0), indexForNode(n, ColumnCount - 1));
    }
}

std::size_t CandidateTreeModel::rowSignature(const std::string& id) const
{
    const kl::Candidate& c = m_session->tree.at(id);
    std::size_t h = std::hash<std::string>()(c.statusReason);
    auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    mix(static_cast<std::size_t>(c.status));
    mix(id == m_bestId);
    mix(id == m_session->tree.head());
    const auto e = m_session->evaluations.find(id);
    if (e != m_session->evaluations.end()) {
        mix(std::hash<double>()(e->second.objective));
        mix(std::hash<double>()(latencyUs(e->second).value_or(-1)));
    }
    const auto hyp = m_session->hypotheses.find(c.hypothesisId);
    if (hyp != m_session->hypotheses.end())
        mix(std::hash<std::string>()(hyp->second.text));
    return h;
}

void CandidateTreeModel::rebuild()
{
    m_nodes.clear();
    m_roots.clear();
    m_byId.clear();
    m_bestId.clear();
    if (!m_session)
        return;
    const auto best = bestCandidate(*m_session);
    m_bestId = best ? *best : std::string();
    m_nodes.reserve(m_session->tree.size());
    for (const auto& id : m_session->tree.order())
        appendNode(m_session->tree.at(id));
}

void CandidateTreeModel::appendNode(const kl::Candidate& c)
{
    Node node;
    node.id = c.id;
    const auto parentIt = m_byId.find(c.parentId);
    const int self = static_cast<int>(m_nodes.size());
    if (parentIt == m_byId.end()) {
        node.parent = -1;
        node.row = static_cast<int>(m_roots.size());
        m_roots.push_back(self);
    } else {
        node.parent = parentIt->second;
        node.row = static_cast<int>(m_nodes[parentIt->second].children.size());
        m_nodes[parentIt->second].children.push_back(self);
    }
    m_byId.emplace(c.id, self);
    m_nodes.push_back(std::move(node));
    m_nodes.back().signature = rowSignature(c.id);
}

QModelIndex CandidateTreeModel::indexForNode(int node, int column) const
{
    return createIndex(m_nodes[node].row, column, quintptr(node));
}

QModelIndex CandidateTreeModel::indexOf(const QString& candidateId, int column) const
{
    const auto it = m_byId.find(candidateId.toStdString());
    if (it == m_byId.end())
        return {};
    return indexForNode(it->second, column);
}

QString CandidateTreeModel::candidateIdAt(const QModelIndex& index) const
{
    if (!index.isValid() || index.model() != this)
        return {};
    return QString::fromStdString(m_nodes[index.internalId()].id);
}

QModelIndex CandidateTreeModel::index(int row, int column, const QModelIndex& parent) const
{
    if (row < 0 || column < 0 || column >= ColumnCount)
        return {};
    if (!parent.isValid()) {
        if (row >= static_cast<int>(m_roots.size()))
            return {};
        return createIndex(row, column, quintptr(m_roots[row]));
    }
    if (parent.column() != 0)
        return {};
    const auto& children = m_nodes[parent.internalId()].children;
    if (row >= static_cast<int>(children.size()))
        return {};
    return createIndex(row, column, quintptr(children[row]));
}

QModelIndex CandidateTreeModel::parent(const QModelIndex& child) const
{
    if (!child.isValid())
        return {};
    const int p = m_nodes[child.internalId()].parent;
    if (p < 0)
        return {};
    return indexForNode(p, IdColumn);
}

int CandidateTreeModel::rowCount(const QModelIndex& parent) const
{
    if (!parent.isValid())
        return static_cast<int>(m_roots.size());
    if (parent.column() != 0)
        return 0;
    return static_cast<int>(m_nodes[parent.internalId()].children.size());
}

int CandidateTreeModel::columnCount(const QModelIndex&) const
{
    return ColumnCount;
}

QVariant CandidateTreeModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || !m_session)
        return {};
    const Node& node = m_nodes[index.internalId()];
    const kl::Candidate& c = m_session->tree.at(node.id);
    const auto evalIt = m_session->evaluations.find(node.id);
    const kl::Evaluation* eval = evalIt == m_session->evaluations.end() ? nullptr : &evalIt->second;
    const bool isBest = node.id == m_bestId;
    const bool isHead = node.id == m_session->tree.head();

    switch (role) {
    case CandidateIdRole:
        return QString::fromStdString(node.id);
    case StatusRole:
        return static_cast<int>(c.status);
    case IsBestRole:
        return isBest;
    case IsHeadRole:
        return isHead;
    default:
        break;
    }

    const int column = index.column();
    if (role == Qt::DisplayRole || role == SortRole) {
        switch (column) {
        case IdColumn: {
            if (role == SortRole)
                return QString::fromStdString(node.id);
            QString text = QString::fromStdString(node.id);
            if (isBest)
                text += QStringLiteral("  ★ best");
            if (isHead)
                text += QStringLiteral("  ◂ head");
            return text;
        }
        case StatusColumn:
            if (role == SortRole)
                return static_cast<int>(c.status);
            if (!c.statusReason.empty() && !kl::isTerminal(c.status))
                return stateText(c);
            if (const std::string reason = kl::displayReason(c); !reason.empty())
                return QString(stateText(c) + QStringLiteral(": ") + firstLine(reason, 60));
            return stateText(c);
        case AuthorColumn:
            return authorText(c);
        case HypothesisColumn: {
            const auto h = m_session->hypotheses.find(c.hypothesisId);
            if (h == m_session->hypotheses.end())
                return QString();
            return firstLine(h->second.text);
        }
        case LatencyColumn: {
            const auto v = eval ? latencyUs(*eval) : std::nullopt;
            if (role == SortRole)
                return v ? *v : 0.0;
            return v ? formatLatency(*v) : QString();
        }
        case SpeedupColumn: {
            const auto v = eval ? speedup(*eval) : std::nullopt;
            if (role == SortRole)
                return v ? *v : 0.0;
            return v ? formatSpeedup(*v) : QString();
        }
        default:
            return {};
        }
    }
    if (role == Qt::DecorationRole && column == IdColumn)
        return statusIcon(shownStatus(c));
    if (role == Qt::ForegroundRole) {
        if (column == StatusColumn)
            return statusColor(shownStatus(c));
        if (kl::isTerminal(c.status) && c.status != kl::CandidateStatus::Accepted && !kl::isSeededBaseline(c))
            return theme().mutedText;
        return {};
    }
    if (role == Qt::FontRole && isBest) {
        QFont f;
        f.setBold(true);
        return f;
    }
    if (role == Qt::TextAlignmentRole && (column == LatencyColumn || column == SpeedupColumn))
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole) {
        QString tip = QStringLiteral("<b>%1</b> — %2").arg(QString::fromStdString(node.id), stateText(c));
        if (const std::string reason = kl::displayReason(c); !reason.empty())
            tip += QStringLiteral("<br>%1").arg(QString::fromStdString(reason).toHtmlEscaped());
        if (!c.params.empty()) {
            QStringList params;
            for (const auto& [name, value] : c.params)
                params << QStringLiteral("%1=%2").arg(QString::fromStdString(name)).arg(value);
            tip += QStringLiteral("<br><tt>%1</tt>").arg(params.join(QLatin1Char(' ')));
        }
        if (eval) {
            const bool baseline = kl::displayState(c) != statusName(c.status);
            for (const auto& reason : eval->reasons) {
                if (baseline && reason.rule.rfind("decide.", 0) == 0)
                    continue; // the loop compared the baseline with itself
                tip += QStringLiteral("<br>• <tt>%1</tt> %2")
                           .arg(QString::fromStdString(reason.rule),
                               QString::fromStdString(reason.message).toHtmlEscaped());
            }
        }
        return tip;
    }
    return {};
}

QVariant CandidateTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case IdColumn:
        return tr("Candidate");
    case StatusColumn:
        return tr("Status");
    case AuthorColumn:
        return tr("Author");
    case HypothesisColumn:
        return tr("Hypothesis");
    case LatencyColumn:
        return tr("Latency");
    case SpeedupColumn:
        return tr("Speedup");
    default:
        return {};
    }
}

} // namespace kl::app
