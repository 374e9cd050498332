#pragma once
// Shared fixtures for the loop tests: temporary session directories and a scripted agent.
#include "core/agent.h"
#include "core/session_store.h"
#include "tests/loop/synthetic_evaluator.h"

#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace kl::testonly {

inline std::filesystem::path freshDir(const std::string& name)
{
    static std::mt19937_64 rng(std::random_device {}());
    // Sessions fsync every event; tmpfs keeps the suite fast on CI disks.
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
        ? std::filesystem::path("/dev/shm")
        : std::filesystem::temp_directory_path();
    const auto dir = base / ("kl-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000));
    std::filesystem::remove_all(dir);
    return dir;
}

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
            p.candidate.params = m_script[m_next++];
            p.candidate.author = Author::Tuner;
            p.needsReview = needsReview;
            out.push_back(std::move(p));
        }
        std::lock_guard lock(m_mutex);
        parents.push_back(ctx.branchFrom);
        return out;
    }
    void observe(const Candidate& c, const Evaluation& e) override
    {
        std::lock_guard lock(m_mutex);
        observed.emplace_back(c.id, e.verdict);
    }
    bool needsReview = false;
    std::vector<std::pair<CandidateId, Verdict>> observed;
    std::vector<CandidateId> parents;

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
