#include "agent/tuner/tuner_agent.h"

#include "agent/tuner/search_space.h"
#include "agent/tuner/strategy.h"
#include "core/errors.h"
#include "core/loop_device_limits.h"
#include "core/session_store.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

namespace kl {

double tunerCost(const Evaluation& e)
{
    const double inf = std::numeric_limits<double>::infinity();
    if (e.verdict == Verdict::CompileFailed || e.verdict == Verdict::Crashed || e.verdict == Verdict::TimedOut)
        return inf;
    if (!(e.objective > 0) || !std::isfinite(e.objective) || !e.correctEverywhere())
        return inf;
    for (const VerdictReason& r : e.reasons)
        if (r.blocking && r.rule.rfind("decide.", 0) != 0)
            return inf; // incorrect, pruned or caught by the referee: not a speed to learn from
    return 1.0 / e.objective;
}

namespace {

    class TunerAgent final : public Agent {
    public:
        TunerAgent(std::string strategy, TunerOptions options)
            : m_strategyName(std::move(strategy))
            , m_options(options)
        {
        }

        std::string name() const override { return "tuner:" + m_strategyName; }

        std::vector<Proposal> propose(const AgentContext& ctx, const CancelToken& cancel) override
        {
            if (!ctx.problem || !ctx.session)
                throw InputError("tuner: the agent context has no problem or session");
            const Session& s = *ctx.session;
            // Tune the head's source. When the head is the root without parameters (the naive baseline), tune the
            // first candidate that declares some, else the problem's template.
            std::string source;
            CandidateId parent;
            const bool headKnown = !ctx.branchFrom.empty() && s.tree.contains(ctx.branchFrom);
            if (headKnown && declaresParams(s.tree.at(ctx.branchFrom).source)) {
                parent = ctx.branchFrom;
            } else if (headKnown && ctx.branchFrom != s.tree.order().front()) {
                return {}; // a head without parameters (e.g. LLM code): nothing for the tuner to search there
            } else {
                for (const CandidateId& id : s.tree.order())
                    if (declaresParams(s.tree.at(id).source)) {
                        parent = id;
                        break;
                    }
            }
            if (!parent.empty())
                source = s.tree.at(parent).source;
            else
                source = readTemplate(*ctx.problem, s.device);
            const std::string hash = sha256Hex(source);
            if (hash != m_sourceHash)
                rebuild(source, hash, *ctx.problem, s);
            std::vector<Proposal> out;
            if (cancel.cancelled())
                return out;
            const std::vector<std::size_t> picks
                = m_strategy->next(static_cast<std::size_t>(std::max(0, ctx.maxProposals)));
            for (std::size_t i : picks) {
                Proposal p;
                p.candidate.parentId = parent;
                p.candidate.source = source;
                p.candidate.params = m_space.config(i);
                p.candidate.author = Author::Tuner;
                p.candidate.agent = name();
                p.candidate.hypothesisId = ctx.hypothesis ? ctx.hypothesis->id : HypothesisId {};
                p.note = m_strategyName + ": configuration " + std::to_string(m_strategy->visitedCount()) + " of "
                    + std::to_string(m_space.size()) + " valid";
                out.push_back(std::move(p));
            }
            return out;
        }

        void observe(const Candidate& c, const Evaluation& e) override
        {
            if (!m_strategy)
                return;
            const std::string hash = c.sourceHash.empty() ? sha256Hex(c.source) : c.sourceHash;
            if (hash != m_sourceHash)
                return;
            if (auto i = m_space.indexOf(c.params))
                m_strategy->observe(*i, tunerCost(e));
        }

    private:
        bool declaresParams(const std::string& source)
        {
            const std::string h = sha256Hex(source);
            if (auto it = m_declares.find(h); it != m_declares.end())
                return it->second;
            bool yes = false;
            try {
                yes = !parseKernelSpec(source).params.empty();
            } catch (const std::exception&) {
            }
            m_declares[h] = yes;
            return yes;
        }

        static std::string readTemplate(const Problem& p, const DeviceInfo& device)
        {
            if (p.folder.empty())
                throw InputError("tuner: the session has no candidate and problem '" + p.name
                    + "' has no folder to read its template from");
            const std::filesystem::path path = std::filesystem::path(p.folder) / p.templateFor(archNumber(device));
            try {
                return readFile(path);
            } catch (const std::exception& ex) {
                throw InputError("tuner: cannot read the template " + path.string() + ": " + ex.what());
            }
        }

        void rebuild(const std::string& source, const std::string& hash, const Problem& problem, const Session& s)
        {
            const KernelSpec spec = parseKernelSpec(source);
            m_space = tuner::SearchSpace::build(spec, shapesOf(problem), s.device, m_options.maxDeclaredSpace);
            m_strategy = tuner::makeStrategy(m_strategyName, m_space, m_options.seed);
            m_sourceHash = hash;
            // What the session already holds for this source is neither proposed again nor forgotten (resume).
            for (const CandidateId& id : s.tree.order()) {
                const Candidate& c = s.tree.at(id);
                const std::string h = c.sourceHash.empty() ? sha256Hex(c.source) : c.sourceHash;
                if (h != hash)
                    continue;
                const auto i = m_space.indexOf(c.params);
                if (!i)
                    continue;
                const auto e = s.evaluations.find(id);
                if (e != s.evaluations.end() && !e->second.shapes.empty() && !awaiting(c.status))
                    m_strategy->observe(*i, tunerCost(e->second));
                else if (e != s.evaluations.end() && !awaiting(c.status))
                    m_strategy->observe(*i, std::numeric_limits<double>::infinity());
                else
                    m_strategy->markVisited(*i);
            }
        }

        static bool awaiting(CandidateStatus st)
        {
            return st == CandidateStatus::Proposed || st == CandidateStatus::Approved
                || st == CandidateStatus::Compiling || st == CandidateStatus::Verifying || st == CandidateStatus::Timing
                || st == CandidateStatus::PendingReview;
        }

        std::string m_strategyName;
        TunerOptions m_options;
        std::string m_sourceHash;
        tuner::SearchSpace m_space;
        std::unique_ptr<tuner::SearchStrategy> m_strategy;
        std::map<std::string, bool> m_declares; // source hash -> declares parameters
    };

} // namespace

std::unique_ptr<Agent> makeTunerAgent(const std::string& strategy, const TunerOptions& options)
{
    return std::make_unique<TunerAgent>(tuner::canonicalStrategyName(strategy), options);
}

} // namespace kl
