#include "agent/tuner/search_space.h"
#include "agent/tuner/tuner_agent.h"
#include "agent/tuning_db/tuning_database.h"
#include "core/errors.h"
#include "core/research_loop.h"
#include "tests/core/loop_test_support.h"

#include <gtest/gtest.h>
#include <set>

using namespace kl;
using namespace kl::testonly;

namespace {

// The session starts as kloop run starts it: the template at its defaults is the root.
std::unique_ptr<SessionStore> newSession(
    const std::filesystem::path& dir, const SyntheticEvaluatorForTests& ev, const std::string& agent, Budget b)
{
    auto store = SessionStore::create(dir, sessionHeader(ev, agent, b));
    Candidate root;
    root.source = kSyntheticTemplate;
    root.params = parseKernelSpec(kSyntheticTemplate).defaults();
    root.author = Author::Human;
    root.agent = "template";
    store->proposeCandidate(root);
    return store;
}

double trueOptimumObjective(const SyntheticEvaluatorForTests& ev)
{
    const auto space
        = tuner::SearchSpace::build(parseKernelSpec(kSyntheticTemplate), ev.problem().verifyShapes, ev.device());
    double best = 0;
    for (std::size_t i = 0; i < space.size(); ++i) {
        double logSum = 0, w = 0;
        for (const Shape& s : ev.problem().tuningShapes) {
            logSum += s.weight * std::log(ev.baselineUs(s) / ev.latencyUs(space.config(i), s));
            w += s.weight;
        }
        best = std::max(best, std::exp(logSum / w));
    }
    return best;
}

} // namespace

TEST(TunerAgent, ExhaustiveMeasuresEveryRunnableConfigurationOnceAndFindsTheOptimum)
{
    const auto dir = freshDir("tuner-exhaustive");
    SyntheticEvaluatorForTests ev;
    auto store = newSession(dir, ev, "tuner:exhaustive", {});
    auto agent = makeTunerAgent("exhaustive");
    EXPECT_EQ(agent->name(), "tuner:exhaustive");
    ResearchLoop loop(*store, ev, *agent);
    const LoopResult r = loop.run();
    EXPECT_EQ(r.reason, "the agent has nothing left to propose");

    const auto space
        = tuner::SearchSpace::build(parseKernelSpec(kSyntheticTemplate), ev.problem().verifyShapes, ev.device());
    const Session& s = store->session();
    std::set<ParamValues> params;
    for (const auto& id : s.tree.order())
        EXPECT_TRUE(params.insert(s.tree.at(id).params).second) << "configuration proposed twice";
    EXPECT_EQ(params.size(), space.size()); // the root (defaults) is one of them
    // Register-heavy configurations were compiled but never timed.
    int registerPruned = 0;
    for (const auto& id : s.tree.order())
        for (const auto& reason : s.evaluations.at(id).reasons)
            registerPruned += reason.rule == "device.registers";
    EXPECT_GT(registerPruned, 0);
    EXPECT_EQ(ev.evaluateCalls.load(), static_cast<int>(space.size()) - registerPruned);
    for (const ParamValues& p : ev.evaluatedParams())
        EXPECT_LE(p.at("BLOCK") * (24 * p.at("UNROLL") + 4 * p.at("VEC")), 65536);
    ASSERT_TRUE(r.best);
    EXPECT_GE(r.bestObjective, trueOptimumObjective(ev) / 1.03);
    std::filesystem::remove_all(dir);
}

TEST(TunerAgent, EveryStrategyImprovesWithinASmallBudgetWithoutRepeats)
{
    for (const std::string strategy : { "random", "anneal", "genetic", "bayes" }) {
        const auto dir = freshDir("tuner-" + strategy);
        SyntheticEvaluatorForTests ev;
        Budget b;
        b.maxEvaluations = 40;
        auto store = newSession(dir, ev, "tuner:" + strategy, b);
        auto agent = makeTunerAgent(strategy);
        ResearchLoop loop(*store, ev, *agent);
        const LoopResult r = loop.run();
        EXPECT_EQ(r.reason, "budget: 40 evaluations") << strategy;
        std::set<ParamValues> params;
        for (const auto& id : store->session().tree.order())
            EXPECT_TRUE(params.insert(store->session().tree.at(id).params).second) << strategy;
        ASSERT_TRUE(r.best) << strategy;
        EXPECT_GT(r.bestObjective, 1.5) << strategy; // the baseline is 2.5x the optimum
        std::filesystem::remove_all(dir);
    }
}

TEST(TunerAgent, ResumedTunerContinuesTheSearchWithoutRepeating)
{
    const auto dir = freshDir("tuner-resume");
    SyntheticEvaluatorForTests ev;
    Budget b;
    b.maxEvaluations = 20;
    auto store = newSession(dir, ev, "tuner:bayes", b);
    {
        auto agent = makeTunerAgent("bayes");
        ResearchLoop loop(*store, ev, *agent);
        loop.run();
    }
    store.reset();
    auto reopened = SessionStore::open(dir);
    SyntheticEvaluatorForTests second;
    auto agent = makeTunerAgent("bayes"); // a fresh process: it learns the history from the session
    LoopOptions o;
    Budget more;
    more.maxEvaluations = 35;
    o.budgetOverride = more;
    ResearchLoop loop(*reopened, second, *agent, o);
    loop.run();
    EXPECT_EQ(second.evaluateCalls.load() + ev.evaluateCalls.load() <= 35, true);
    std::set<ParamValues> params;
    for (const auto& id : reopened->session().tree.order())
        EXPECT_TRUE(params.insert(reopened->session().tree.at(id).params).second);
    EXPECT_EQ(params.size(), 35u);
    std::filesystem::remove_all(dir);
}

TEST(TunerAgent, TuningDatabaseMeansASecondSessionMeasuresNothingAgain)
{
    const auto dbFile = freshDir("tuner-db") / "tuning.jsonl";
    const auto dirA = freshDir("tuner-db-a");
    const auto dirB = freshDir("tuner-db-b");
    Budget b;
    b.maxEvaluations = 25;
    SyntheticEvaluatorForTests first;
    {
        auto db = TuningDatabase::open(dbFile);
        auto store = newSession(dirA, first, "tuner:exhaustive", b);
        auto agent = makeTunerAgent("exhaustive");
        LoopOptions o;
        o.cache = db.get();
        ResearchLoop loop(*store, first, *agent, o);
        loop.run();
        EXPECT_EQ(db->size(), 25u);
    }
    SyntheticEvaluatorForTests second;
    auto db = TuningDatabase::open(dbFile); // another process, later
    auto store = newSession(dirB, second, "tuner:exhaustive", b);
    auto agent = makeTunerAgent("exhaustive"); // proposes the same configurations in the same order
    LoopOptions o;
    o.cache = db.get();
    ResearchLoop loop(*store, second, *agent, o);
    const LoopResult r = loop.run();
    EXPECT_EQ(second.evaluateCalls.load(), 0);
    EXPECT_EQ(r.reusedThisRun, 25);
    const Session a = SessionStore::load(dirA);
    const Session& s = store->session();
    for (const auto& id : s.tree.order())
        EXPECT_EQ(s.tree.at(id).status, a.tree.at(id).status) << id;
    std::filesystem::remove_all(dbFile.parent_path());
    std::filesystem::remove_all(dirA);
    std::filesystem::remove_all(dirB);
}

TEST(TunerAgent, UnknownStrategyIsAnInputError)
{
    EXPECT_THROW(makeTunerAgent("hill-climb-please"), InputError);
}

TEST(TunerAgent, HeadWithoutParametersGivesTheTurnBack)
{
    // The combined llm+tuner agent relies on this: a head written without parameters has nothing to tune.
    const auto dir = freshDir("tuner-noparams");
    SyntheticEvaluatorForTests ev;
    Session header = sessionHeader(ev, "tuner:random", {});
    auto store = SessionStore::create(dir, header);
    Candidate baseline;
    baseline.source = "// @kl:launch synthetic_kernel grid=(T) block=(128) smem=0 args=(y, x, T, H)\n";
    const CandidateId root = store->proposeCandidate(baseline).candidateId;
    Candidate tmpl;
    tmpl.source = kSyntheticTemplate;
    tmpl.parentId = root;
    tmpl.params = parseKernelSpec(kSyntheticTemplate).defaults();
    const CandidateId t = store->proposeCandidate(tmpl).candidateId;
    Candidate handWritten = baseline;
    handWritten.source += "// rewritten by hand\n";
    handWritten.parentId = t;
    const CandidateId h = store->proposeCandidate(handWritten).candidateId;

    auto agent = makeTunerAgent("random");
    const Problem problem = ev.problem();
    AgentContext ctx;
    ctx.problem = &problem;
    ctx.session = &store->session();
    ctx.maxProposals = 3;
    ctx.branchFrom = h;
    EXPECT_TRUE(agent->propose(ctx, CancelToken()).empty());
    ctx.branchFrom = root; // the parameterless root: tune the first candidate that declares parameters
    const auto fromRoot = agent->propose(ctx, CancelToken());
    ASSERT_EQ(fromRoot.size(), 3u);
    for (const Proposal& p : fromRoot) {
        EXPECT_EQ(p.candidate.parentId, t);
        EXPECT_EQ(p.candidate.source, kSyntheticTemplate);
        EXPECT_NE(p.candidate.params, tmpl.params); // the template's own configuration is already in the tree
    }
    std::filesystem::remove_all(dir);
}
