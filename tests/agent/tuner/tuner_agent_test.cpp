#include "agent/tuner/search_space.h"
#include "agent/tuner/tuner_agent.h"
#include "agent/tuning_db/tuning_database.h"
#include "core/errors.h"
#include "core/research_loop.h"
#include "tests/core/loop_test_support.h"

#include <algorithm>
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

namespace {

// A session of `strategy` stopped after `first` evaluations, then resumed up to `total` by a fresh tuner (a new
// process: it learns the history from the session). evaluated: what both runs measured.
std::unique_ptr<SessionStore> stoppedAndResumed(
    const std::filesystem::path& dir, const std::string& strategy, int first, int total, int* evaluated)
{
    SyntheticEvaluatorForTests ev;
    Budget b;
    b.maxEvaluations = first;
    auto store = newSession(dir, ev, "tuner:" + strategy, b);
    {
        auto agent = makeTunerAgent(strategy);
        ResearchLoop(*store, ev, *agent).run();
    }
    store.reset();
    auto reopened = SessionStore::open(dir);
    SyntheticEvaluatorForTests second;
    auto agent = makeTunerAgent(strategy);
    LoopOptions o;
    Budget more;
    more.maxEvaluations = total;
    o.budgetOverride = more;
    ResearchLoop(*reopened, second, *agent, o).run();
    *evaluated = ev.evaluateCalls.load() + second.evaluateCalls.load();
    return reopened;
}

} // namespace

TEST(TunerAgent, ResumedTunerContinuesTheSearchWithoutRepeating)
{
    const auto dir = freshDir("tuner-resume");
    int evaluated = 0;
    const auto reopened = stoppedAndResumed(dir, "bayes", 20, 35, &evaluated);
    EXPECT_LE(evaluated, 35);
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

double deviceMsOf(const Session& s)
{
    double ms = 0;
    for (const auto& [id, e] : s.evaluations)
        ms += e.deviceMs;
    return ms;
}

TEST(TunerAgent, HalvingScreensEveryConfigurationPromotesTheContendersAndSpendsLessDeviceTime)
{
    SyntheticEvaluatorForTests fullEv, halvingEv;
    const auto fullDir = freshDir("tuner-full"), halvingDir = freshDir("tuner-halving");
    auto fullStore = newSession(fullDir, fullEv, "tuner:exhaustive", {});
    auto halvingStore = newSession(halvingDir, halvingEv, "tuner:exhaustive:halving=5x1", {});
    auto fullAgent = makeTunerAgent("exhaustive");
    auto halvingAgent = makeTunerAgent("exhaustive:halving=5x1");
    EXPECT_EQ(halvingAgent->name(), "tuner:exhaustive:halving");
    const LoopResult full = ResearchLoop(*fullStore, fullEv, *fullAgent).run();
    const LoopResult halving = ResearchLoop(*halvingStore, halvingEv, *halvingAgent).run();
    EXPECT_EQ(halving.reason, "the agent has nothing left to propose");

    const Session& s = halvingStore->session();
    std::set<ParamValues> screened, promoted;
    for (const CandidateId& id : s.tree.order()) {
        const Candidate& c = s.tree.at(id);
        if (c.fidelity.screen()) {
            EXPECT_EQ(c.fidelity, (Fidelity { 5, 1 }));
            EXPECT_TRUE(screened.insert(c.params).second) << "screened twice";
            EXPECT_NE(c.status, CandidateStatus::Accepted) << "a screen became a best";
            if (!s.evaluations.at(id).shapes.empty()) { // measured, not pruned before the device
                EXPECT_TRUE(s.evaluations.at(id).fidelity.screen());
            }
        } else if (c.agent == halvingAgent->name()) {
            EXPECT_TRUE(promoted.insert(c.params).second) << "promoted twice";
        }
    }
    for (const ParamValues& p : promoted)
        EXPECT_TRUE(screened.count(p)) << "full protocol without a screen";
    // The plan is balanced: one in eta screens goes up, eta the full evaluations' mean device time over the screens'
    // (within [3, 8]; the first promotions, before a full evaluation was measured, at 4).
    double screenMs = 0, fullMs = 0;
    int screens = 0, fulls = 0;
    for (const CandidateId& id : s.tree.order())
        if (const auto& e = s.evaluations.at(id); e.deviceMs > 0)
            (e.fidelity.screen() ? (screenMs += e.deviceMs, ++screens) : (fullMs += e.deviceMs, ++fulls));
    ASSERT_GT(screens, 0);
    ASSERT_GT(fulls, 0);
    const double eta = std::clamp((fullMs / fulls) / (screenMs / screens), 3.0, 8.0);
    EXPECT_GT(eta, 4.5) << "the synthetic screens cost a tenth of a full evaluation";
    const double expected = static_cast<double>(screened.size()) / eta;
    EXPECT_LE(static_cast<double>(promoted.size()), expected + 3);
    EXPECT_GE(static_cast<double>(promoted.size()), expected - 3);
    ASSERT_TRUE(halving.best);
    EXPECT_FALSE(s.tree.at(*halving.best).fidelity.screen());
    EXPECT_GE(halving.bestObjective, trueOptimumObjective(halvingEv) / 1.03);
    // The same final best for less than half the device time of the full-protocol sweep.
    ASSERT_TRUE(full.best);
    EXPECT_GE(halving.bestObjective, full.bestObjective / 1.03);
    EXPECT_LT(deviceMsOf(s), 0.5 * deviceMsOf(fullStore->session()));
    std::filesystem::remove_all(fullDir);
    std::filesystem::remove_all(halvingDir);
}

// The loop tells the agent how much of the budget is left, so a multi-fidelity session's last evaluations confirm its
// best screens on the full protocol instead of screening configurations nothing would promote.
TEST(TunerAgent, HalvingSessionWithABudgetEndsOnFullEvaluationsOfScreenedConfigurations)
{
    SyntheticEvaluatorForTests ev;
    const auto dir = freshDir("tuner-halving-endgame");
    Budget b;
    b.maxEvaluations = 30;
    auto store = newSession(dir, ev, "tuner:random:halving=5x1", b);
    auto agent = makeTunerAgent("random:halving=5x1");
    const LoopResult r = ResearchLoop(*store, ev, *agent).run();
    EXPECT_EQ(r.reason, "budget: 30 evaluations");
    const Session& s = store->session();
    std::vector<CandidateId> order = s.tree.order();
    ASSERT_EQ(order.size(), 30u); // the root, then 29 of the tuner's
    const std::size_t endgame = tuner::HalvingPlan {}.endgame;
    ASSERT_GE(endgame, 2u);
    std::set<ParamValues> screened;
    for (std::size_t k = 0; k + endgame < order.size(); ++k)
        if (s.tree.at(order[k]).fidelity.screen())
            screened.insert(s.tree.at(order[k]).params);
    for (std::size_t k = order.size() - endgame; k < order.size(); ++k) {
        const Candidate& c = s.tree.at(order[k]);
        EXPECT_FALSE(c.fidelity.screen()) << k;
        EXPECT_TRUE(screened.count(c.params)) << k << ": promoted without a screen";
    }
    std::set<ParamValues> full;
    for (std::size_t k = 1; k < order.size(); ++k)
        if (const Candidate& c = s.tree.at(order[k]); !c.fidelity.screen()) {
            EXPECT_TRUE(full.insert(c.params).second) << k << ": promoted twice";
        }
    std::filesystem::remove_all(dir);
}

TEST(TunerAgent, ResumedHalvingTunerRepeatsNoTrial)
{
    const auto dir = freshDir("tuner-halving-resume");
    int evaluated = 0;
    const auto reopened = stoppedAndResumed(dir, "anneal:halving", 30, 60, &evaluated);
    EXPECT_LE(evaluated, 60);
    std::set<std::pair<ParamValues, bool>> trials;
    int full = 0;
    for (const auto& id : reopened->session().tree.order()) {
        const Candidate& c = reopened->session().tree.at(id);
        EXPECT_TRUE(trials.insert({ c.params, c.fidelity.screen() }).second);
        full += c.fidelity.screen() ? 0 : 1;
    }
    EXPECT_EQ(trials.size(), 60u);
    EXPECT_GT(full, 5); // the root and the promotions
    std::filesystem::remove_all(dir);
}

TEST(TunerAgent, MalformedHalvingSuffixIsAnInputError)
{
    for (const char* bad : { "bayes:halving=", "bayes:halving=0x1", "bayes:halving=5", "bayes:halving=5x1y",
             "bayes:screens", "nope:halving" })
        EXPECT_THROW(makeTunerAgent(bad), InputError) << bad;
    EXPECT_NO_THROW(makeTunerAgent("random:halving=3x0"));
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
