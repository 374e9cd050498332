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
#include <sstream>

namespace kl {

double tunerCost(const Evaluation& e)
{
    const double inf = std::numeric_limits<double>::infinity();
    if (!ranToCompletion(e.verdict))
        return inf;
    if (!(e.objective > 0) || !std::isfinite(e.objective) || !e.correctEverywhere())
        return inf;
    for (const VerdictReason& r : e.reasons)
        if (r.blocking && !isLoopDecision(r))
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

        std::string name() const override { return "tuner:" + m_strategyName + (m_options.halving ? ":halving" : ""); }

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
            const auto n = static_cast<std::size_t>(std::max(0, ctx.maxProposals));
            std::vector<tuner::Trial> trials;
            if (m_halving)
                trials = m_halving->next(
                    n, ctx.evaluationsLeft ? std::optional<std::size_t>(*ctx.evaluationsLeft) : std::nullopt);
            else
                for (std::size_t i : m_strategy->next(n))
                    trials.push_back({ i, 0 });
            for (const tuner::Trial& t : trials) {
                Proposal p;
                p.candidate.parentId = parent;
                p.candidate.source = source;
                p.candidate.params = m_space.config(t.index);
                p.candidate.author = Author::Tuner;
                p.candidate.agent = name();
                p.candidate.hypothesisId = ctx.hypothesis ? ctx.hypothesis->id : HypothesisId {};
                p.candidate.fidelity = fidelityOf(t.rung);
                p.note = m_strategyName + ": configuration " + std::to_string(strategy().visitedCount()) + " of "
                    + std::to_string(m_space.size()) + " valid";
                if (m_halving)
                    p.note += t.rung == m_halving->plan().fullRung()
                        ? ", promoted to the full protocol"
                        : ", " + p.candidate.fidelity.label() + (t.rung > 0 ? " (promoted)" : "");
                out.push_back(std::move(p));
            }
            return out;
        }

        void observe(const Candidate& c, const Evaluation& e) override
        {
            if (!m_strategy && !m_halving)
                return;
            const std::string hash = c.sourceHash.empty() ? sha256Hex(c.source) : c.sourceHash;
            if (hash != m_sourceHash)
                return;
            if (auto i = m_space.indexOf(c.params))
                record(*i, c.fidelity, tunerCost(e), e.deviceMs);
        }

    private:
        const tuner::SearchStrategy& strategy() const { return m_halving ? m_halving->base() : *m_strategy; }

        Fidelity fidelityOf(std::size_t rung) const
        {
            return m_halving && rung < m_halving->plan().fullRung() ? m_halving->plan().screens[rung] : Fidelity {};
        }

        // The rung a requested fidelity belongs to; none for a screen this plan does not hold (another plan's).
        std::optional<std::size_t> rungOf(const Fidelity& f) const
        {
            if (!m_halving)
                return f.screen() ? std::nullopt : std::optional<std::size_t>(0);
            const auto& screens = m_halving->plan().screens;
            if (!f.screen())
                return m_halving->plan().fullRung();
            for (std::size_t r = 0; r < screens.size(); ++r)
                if (screens[r] == f)
                    return r;
            return std::nullopt;
        }

        // A result (cost, and the device time it took) or, without one, a configuration in flight.
        void record(std::size_t index, const Fidelity& f, std::optional<double> cost, double deviceMs = 0)
        {
            const auto rung = rungOf(f);
            if (!rung)
                return;
            if (m_halving) {
                if (cost)
                    m_halving->observe({ index, *rung }, *cost, deviceMs);
                else
                    m_halving->markInFlight({ index, *rung });
            } else if (cost) {
                m_strategy->observe(index, *cost);
            } else {
                m_strategy->markVisited(index);
            }
        }

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
            m_halving.reset();
            if (m_options.halving)
                m_halving = std::make_unique<tuner::MultiFidelitySearch>(std::move(m_strategy), *m_options.halving);
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
                    record(*i, c.fidelity, tunerCost(e->second), e->second.deviceMs);
                else if (e != s.evaluations.end() && !awaiting(c.status))
                    record(*i, c.fidelity, std::numeric_limits<double>::infinity());
                else
                    record(*i, c.fidelity, std::nullopt);
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
        std::unique_ptr<tuner::SearchStrategy> m_strategy; // moved into m_halving when there is one
        std::unique_ptr<tuner::MultiFidelitySearch> m_halving;
        std::map<std::string, bool> m_declares; // source hash -> declares parameters
    };

} // namespace

std::unique_ptr<Agent> makeTunerAgent(const std::string& strategy, const TunerOptions& options)
{
    const auto colon = strategy.find(':');
    TunerOptions o = options;
    if (colon != std::string::npos) {
        const std::string suffix = strategy.substr(colon + 1);
        const std::string bad = "tuner strategy '" + strategy
            + "': the suffix must be ':halving' or ':halving=SAMPLESxSHAPES' (e.g. anneal:halving=5x2)";
        if (suffix.rfind("halving", 0) != 0)
            throw InputError(bad);
        tuner::HalvingPlan plan;
        if (suffix != "halving") {
            int samples = 0, shapes = 0;
            char x = 0;
            std::istringstream in(suffix.substr(std::string("halving").size()));
            char eq = 0;
            if (!(in >> eq >> samples >> x >> shapes) || eq != '=' || x != 'x' || samples < 1 || shapes < 0
                || in.peek() != EOF)
                throw InputError(bad);
            plan.screens = { Fidelity { samples, shapes } };
        }
        o.halving = plan;
    }
    return std::make_unique<TunerAgent>(tuner::canonicalStrategyName(strategy.substr(0, colon)), o);
}

} // namespace kl
