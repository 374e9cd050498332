#include "agent/agent_factory.h"

#include "agent/tuner/tuner_agent.h"
#include "core/errors.h"

#include <set>

namespace kl {

namespace {

    // The LLM proposes code; the tuner then exhausts its budget on the parameters of the current head.
    // The tuner says it is done by returning no proposals for a head; then the LLM is asked.
    class LlmThenTunerAgent : public Agent {
    public:
        LlmThenTunerAgent(std::unique_ptr<Agent> llm, std::unique_ptr<Agent> tuner, std::string spec)
            : m_llm(std::move(llm))
            , m_tuner(std::move(tuner))
            , m_spec(std::move(spec))
        {
        }

        std::string name() const override { return m_spec; }

        std::vector<Proposal> propose(const AgentContext& ctx, const CancelToken& cancel) override
        {
            const std::string head = ctx.branchFrom;
            if (!head.empty() && !m_tunerDone.count(head)) {
                auto proposals = m_tuner->propose(ctx, cancel);
                if (!proposals.empty())
                    return proposals;
                m_tunerDone.insert(head);
            }
            AgentContext one = ctx;
            one.maxProposals = 1;
            return m_llm->propose(one, cancel);
        }

        void observe(const Candidate& c, const Evaluation& e) override
        {
            m_tuner->observe(c, e);
            m_llm->observe(c, e);
        }

    private:
        std::unique_ptr<Agent> m_llm;
        std::unique_ptr<Agent> m_tuner;
        std::string m_spec;
        std::set<CandidateId> m_tunerDone;
    };

    std::unique_ptr<Agent> makeSingle(const std::string& spec, const AgentFactoryOptions& options)
    {
        if (spec.rfind("tuner:", 0) == 0) {
            TunerOptions t;
            t.seed = options.seed;
            return makeTunerAgent(spec.substr(6), t);
        }
        if (spec.rfind("llm:", 0) == 0)
            return makeLlmAgent(llmAgentSettingsFor(spec, options.extra), options.llmHooks);
        throw InputError(
            "unknown agent '" + spec + "': use tuner:<strategy>, llm:<provider> or llm:<provider>+tuner:<strategy>");
    }

} // namespace

std::unique_ptr<Agent> makeAgent(const std::string& spec, const AgentFactoryOptions& options)
{
    const auto plus = spec.find('+');
    if (plus == std::string::npos)
        return makeSingle(spec, options);
    const std::string first = spec.substr(0, plus);
    const std::string second = spec.substr(plus + 1);
    if (first.rfind("llm:", 0) != 0 || second.rfind("tuner:", 0) != 0)
        throw InputError("combined agent '" + spec + "' must be llm:<provider>+tuner:<strategy>");
    return std::make_unique<LlmThenTunerAgent>(makeSingle(first, options), makeSingle(second, options), spec);
}

} // namespace kl
