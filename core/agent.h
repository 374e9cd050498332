#pragma once
// The agent interface: the built-in tuner and the LLM agent both implement it. Given the session
// state, an agent returns proposals; the loop evaluates them and tells the agent what happened.
#include "core/cancel.h"
#include "core/candidate.h"
#include "core/evaluation.h"
#include "core/problem.h"
#include "core/session.h"

#include <optional>
#include <string>
#include <vector>

namespace kl {

struct AgentContext {
    const Problem* problem = nullptr;
    const Session* session = nullptr;
    std::optional<Hypothesis> hypothesis; // the engineer's latest, if any
    CandidateId branchFrom; // head of the tree: where proposals branch from
    std::string bottleneckSummary; // the profiler's text summary, when there is one
    int maxProposals = 8; // the loop asks for a batch to keep the compile pool busy
    // The evaluations the session's budget still allows, this batch's included (those in flight taken off, not those
    // waiting for the engineer's review); unset: no limit. The tuner's multi-fidelity search spends the last few on
    // promotions (HalvingPlan::endgame).
    std::optional<int> evaluationsLeft;
};

struct Proposal {
    Candidate candidate; // source, params, parentId, author, agent, hypothesisId
    bool needsReview = false; // LLM code waits for the engineer unless auto-approve is set
    std::string note; // one line on what the agent tried and why
};

class Agent {
public:
    virtual ~Agent() = default;
    virtual std::string name() const = 0; // "tuner:anneal", "llm:openai"
    // May return fewer than asked, or none when the agent has nothing left to try.
    virtual std::vector<Proposal> propose(const AgentContext& ctx, const CancelToken& cancel) = 0;
    virtual void observe(const Candidate& c, const Evaluation& e)
    {
        (void)c;
        (void)e;
    }
};

} // namespace kl
