#include "core/candidate_tree.h"

#include "core/errors.h"

#include <cstdio>
#include <stdexcept>

namespace kl {

void CandidateTree::add(Candidate c)
{
    if (c.id.empty())
        throw InputError("candidate without an id");
    if (m_nodes.count(c.id))
        throw InputError("duplicate candidate id '" + c.id + "'");
    if (!c.parentId.empty() && !m_nodes.count(c.parentId))
        throw InputError("candidate '" + c.id + "' names unknown parent '" + c.parentId + "'");
    const CandidateId id = c.id;
    if (!c.parentId.empty())
        m_children[c.parentId].push_back(id);
    m_nodes.emplace(id, std::move(c));
    m_order.push_back(id);
    if (m_head.empty())
        m_head = id;
}

const Candidate& CandidateTree::at(const CandidateId& id) const
{
    const auto it = m_nodes.find(id);
    if (it == m_nodes.end())
        throw std::out_of_range("no candidate '" + id + "'");
    return it->second;
}

Candidate& CandidateTree::at(const CandidateId& id)
{
    const auto it = m_nodes.find(id);
    if (it == m_nodes.end())
        throw std::out_of_range("no candidate '" + id + "'");
    return it->second;
}

std::vector<CandidateId> CandidateTree::roots() const
{
    std::vector<CandidateId> r;
    for (const auto& id : m_order)
        if (m_nodes.at(id).parentId.empty())
            r.push_back(id);
    return r;
}

std::vector<CandidateId> CandidateTree::children(const CandidateId& id) const
{
    const auto it = m_children.find(id);
    return it == m_children.end() ? std::vector<CandidateId> {} : it->second;
}

std::vector<CandidateId> CandidateTree::lineage(const CandidateId& id) const
{
    std::vector<CandidateId> chain;
    CandidateId cur = id;
    // Parents are added before children, so a chain longer than the tree means corruption.
    while (!cur.empty() && chain.size() <= m_nodes.size()) {
        chain.push_back(cur);
        cur = at(cur).parentId;
    }
    return { chain.rbegin(), chain.rend() };
}

std::vector<CandidateId> CandidateTree::withStatus(const std::set<CandidateStatus>& statuses) const
{
    std::vector<CandidateId> r;
    for (const auto& id : m_order)
        if (statuses.count(m_nodes.at(id).status))
            r.push_back(id);
    return r;
}

std::optional<CandidateId> CandidateTree::best(
    const std::function<std::optional<double>(const Candidate&)>& score) const
{
    std::optional<CandidateId> bestId;
    double bestScore = 0;
    for (const auto& id : m_order) {
        const auto s = score(m_nodes.at(id));
        if (s && (!bestId || *s > bestScore)) {
            bestId = id;
            bestScore = *s;
        }
    }
    return bestId;
}

void CandidateTree::setHead(const CandidateId& id)
{
    if (!m_nodes.count(id))
        throw std::out_of_range("no candidate '" + id + "'");
    m_head = id;
}

std::string CandidateTree::nextId() const
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "c%04zu", m_order.size() + 1);
    std::string id = buf;
    // Ids are never reused, even if a caller picked names of its own.
    for (std::size_t n = m_order.size() + 1; m_nodes.count(id); ++n) {
        std::snprintf(buf, sizeof buf, "c%04zu", n + 1);
        id = buf;
    }
    return id;
}

} // namespace kl
