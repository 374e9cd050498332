#pragma once
// Shared fixtures for the loop tests: temporary session directories and a scripted agent.
#include "core/agent.h"
#include "core/loop_objective.h"
#include "core/session_store.h"
#include "tests/core/synthetic_evaluator.h"
#include "tests/support/temp_dir.h"

#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace kl::testonly {

using kl::test::freshDir;

inline Session sessionHeader(const SyntheticEvaluatorForTests& ev, const std::string& agent, Budget budget = {})
{
    Session s;
    s.id = "test-session";
    s.problemName = ev.problem().name;
    s.device = ev.device();
    s.settings.agent = agent;
    s.settings.budget = budget;
    s.createdMs = nowMs();
    return s;
}

// Whether the decision carries a reason with this rule.
inline bool hasRule(const Decision& d, const std::string& rule)
{
    for (const auto& r : d.reasons)
        if (r.rule == rule)
            return true;
    return false;
}

// Proposes the given configurations in order, as children of the context's head.
class ScriptedAgentForTests final : public Agent {
public:
    explicit ScriptedAgentForTests(std::vector<ParamValues> script)
        : m_script(std::move(script))
    {
    }
    std::string name() const override { return "scripted"; }
    std::vector<Proposal> propose(const AgentContext& ctx, const CancelToken&) override
    {
        std::vector<Proposal> out;
        while (static_cast<int>(out.size()) < ctx.maxProposals && m_next < m_script.size()) {
            Proposal p;
            p.candidate.parentId = ctx.branchFrom;
            p.candidate.source = kSyntheticTemplate;
            if (m_next < fidelity.size())
                p.candidate.fidelity = fidelity[m_next];
            p.candidate.params = m_script[m_next++];
            p.candidate.author = Author::Tuner;
            p.needsReview = needsReview;
            out.push_back(std::move(p));
        }
        std::lock_guard lock(m_mutex);
        parents.push_back(ctx.branchFrom);
        told.emplace_back(ctx.evaluationsLeft, ctx.session ? ctx.session->tree.order().size() : 0);
        return out;
    }
    void observe(const Candidate& c, const Evaluation& e) override
    {
        std::lock_guard lock(m_mutex);
        observed.emplace_back(c.id, e.verdict);
    }
    bool needsReview = false;
    std::vector<Fidelity> fidelity; // by script position; beyond it: the full protocol
    std::vector<std::pair<CandidateId, Verdict>> observed;
    std::vector<CandidateId> parents;
    // Per call: the evaluations the loop said the budget still allows, and the candidates the session held then.
    std::vector<std::pair<std::optional<int>, std::size_t>> told;

private:
    std::vector<ParamValues> m_script;
    std::size_t m_next = 0;
    std::mutex m_mutex;
};

inline ParamValues cfg(std::int64_t block, std::int64_t vec, std::int64_t unroll = 2, std::int64_t rows = 2)
{
    return { { "BLOCK", block }, { "VEC", vec }, { "UNROLL", unroll }, { "ROWS", rows } };
}

} // namespace kl::testonly
