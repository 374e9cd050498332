#pragma once
// The candidates of a session as a tree. Pure operations, no I/O; nothing is ever removed.
#include "core/candidate.h"

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace kl {

class CandidateTree {
public:
    // Throws InputError on a duplicate id or an unknown parent.
    void add(Candidate c);
    bool contains(const CandidateId& id) const { return m_nodes.count(id) != 0; }
    const Candidate& at(const CandidateId& id) const; // throws std::out_of_range
    Candidate& at(const CandidateId& id);
    std::size_t size() const { return m_order.size(); }
    bool empty() const { return m_order.empty(); }

    std::vector<CandidateId> roots() const;
    std::vector<CandidateId> children(const CandidateId& id) const;
    // Root first, id last.
    std::vector<CandidateId> lineage(const CandidateId& id) const;
    // In insertion order.
    const std::vector<CandidateId>& order() const { return m_order; }
    std::vector<CandidateId> withStatus(const std::set<CandidateStatus>& statuses) const;

    // The node with the best score among those that pass the filter; score higher is better.
    std::optional<CandidateId> best(const std::function<std::optional<double>(const Candidate&)>& score) const;

    // Where the next proposals branch from. Rolling back moves it; it never deletes anything.
    const CandidateId& head() const { return m_head; }
    void setHead(const CandidateId& id); // throws std::out_of_range for an unknown id

    std::string nextId() const; // "c0001", "c0002", ...

private:
    std::map<CandidateId, Candidate> m_nodes;
    std::map<CandidateId, std::vector<CandidateId>> m_children;
    std::vector<CandidateId> m_order;
    CandidateId m_head;
};

} // namespace kl
