#include "core/current_best.h"
#include "core/research_loop.h"
#include "tests/core/loop_test_support.h"

#include <chrono>
#include <gtest/gtest.h>
#include <set>
#include <thread>

using namespace kl;
using namespace kl::testonly;

namespace {

// Five block sizes by three vector widths.
std::vector<ParamValues> fifteenConfigurations()
{
    std::vector<ParamValues> script;
    for (std::int64_t bl : { 32, 64, 128, 256, 512 })
        for (std::int64_t v : { 1, 2, 4 })
            script.push_back(cfg(bl, v));
    return script;
}

struct Fixture {
    explicit Fixture(const std::string& name, const std::string& agent = "scripted", Budget budget = {})
        : dir(freshDir(name))
    {
        store = SessionStore::create(dir, sessionHeader(evaluator, agent, budget));
    }
    ~Fixture() { std::filesystem::remove_all(dir); }

    std::vector<Event> eventsOf(EventKind k) const
    {
        std::vector<Event> out;
        for (const Event& e : store->events())
            if (e.kind == k)
                out.push_back(e);
        return out;
    }

    std::filesystem::path dir;
    SyntheticEvaluatorForTests evaluator;
    std::unique_ptr<SessionStore> store;
};

LoopOptions sequentialOptions()
{
    LoopOptions o;
    o.compileThreads = 1;
    o.pipelineDepth = 1;
    return o;
}

int recorded(const Session& s)
{
    int n = 0;
    for (const auto& id : s.tree.order())
        if (s.evaluations.count(id) && isTerminal(s.tree.at(id).status))
            ++n;
    return n;
}

} // namespace

TEST(ResearchLoop, AcceptsOnlySignificantCorrectImprovementsAndTracksTheBest)
{
    Fixture f("decide");
    // Latency per configuration chosen by the test: BLOCK encodes the scenario.
    f.evaluator.latencyUs = [&](const ParamValues& p, const Shape& s) {
        const double base = f.evaluator.baselineUs(s);
        switch (p.at("BLOCK")) {
        case 32:
            return base / 1.5; // A: 1.5x over the baseline -> accepted
        case 64:
            return base / 1.3; // B: slower than A -> rejected
        case 128:
            return base / 1.8; // C: 20% over A -> accepted
        case 256:
            return base / 2.5; // D: fastest but wrong -> rejected
        default:
            return base / 1.805; // E: 0.3% over C, inside the interval -> rejected
        }
    };
    f.evaluator.incorrect
        = [](const ParamValues& p, const Shape& s) { return p.at("BLOCK") == 256 && s.dims.at("T") == 1; };
    ScriptedAgentForTests agent({ cfg(32, 1), cfg(64, 1), cfg(128, 1), cfg(256, 1), cfg(512, 1) });
    ResearchLoop loop(*f.store, f.evaluator, agent, sequentialOptions());
    const LoopResult r = loop.run();

    const Session& s = f.store->session();
    ASSERT_EQ(s.tree.size(), 5u) << r.state << ": " << r.reason << "\n"
                                 << [&] {
                                        std::string t;
                                        for (auto& e : f.store->events())
                                            t += eventToJson(e).dump().substr(0, 300) + "\n";
                                        return t;
                                    }();
    const auto& ids = s.tree.order();
    EXPECT_EQ(s.tree.at(ids[0]).status, CandidateStatus::Accepted);
    EXPECT_EQ(s.tree.at(ids[1]).status, CandidateStatus::Rejected);
    EXPECT_EQ(s.tree.at(ids[2]).status, CandidateStatus::Accepted);
    EXPECT_EQ(s.tree.at(ids[3]).status, CandidateStatus::Rejected);
    EXPECT_EQ(s.tree.at(ids[4]).status, CandidateStatus::Rejected);
    auto rules = [&](const CandidateId& id) {
        std::set<std::string> out;
        for (const auto& reason : s.evaluations.at(id).reasons)
            out.insert(reason.rule);
        return out;
    };
    EXPECT_TRUE(rules(ids[1]).count("decide.slower"));
    EXPECT_TRUE(rules(ids[3]).count("decide.incorrect"));
    EXPECT_TRUE(rules(ids[4]).count("decide.not-significant"));
    EXPECT_NEAR(s.evaluations.at(ids[2]).objective, 1.8, 1e-9);

    EXPECT_EQ(r.state, "finished");
    EXPECT_EQ(r.reason, "the agent has nothing left to propose");
    ASSERT_TRUE(r.best);
    EXPECT_EQ(*r.best, ids[2]);
    EXPECT_EQ(s.tree.head(), ids[2]); // proposals branch from the best
    EXPECT_EQ(f.eventsOf(EventKind::BestChanged).size(), 2u);
    EXPECT_EQ(f.eventsOf(EventKind::CandidateVerified).size(), 5u);
    EXPECT_EQ(f.eventsOf(EventKind::CandidateTimed).size(), 5u);
    EXPECT_EQ(f.eventsOf(EventKind::CandidateCompiled).size(), 5u);
    EXPECT_EQ(agent.observed.size(), 5u);
    // The reloaded session says the same (the journal is the truth).
    const Session reloaded = SessionStore::load(f.dir);
    EXPECT_EQ(reloaded.tree.at(ids[2]).status, CandidateStatus::Accepted);
    EXPECT_EQ(reloaded.tree.head(), ids[2]);
}

TEST(ResearchLoop, AScreenIsNeverTheBestAndIsMeasuredApartFromTheFullProtocol)
{
    Fixture f("screen");
    f.evaluator.latencyUs = [&](const ParamValues& p, const Shape& s) {
        return f.evaluator.baselineUs(s) / (p.at("BLOCK") == 256 ? 2.0 : 1.5);
    };
    // The fastest configuration screened (accepted if it were full), the same configuration in full, then a
    // slower one in full: only the full measurement of the first can be the best.
    ScriptedAgentForTests agent({ cfg(256, 4), cfg(256, 4), cfg(64, 4) });
    const Fidelity screen { 5, 1 };
    agent.fidelity = { screen };
    ResearchLoop loop(*f.store, f.evaluator, agent, sequentialOptions());
    const LoopResult r = loop.run();

    const Session& s = f.store->session();
    ASSERT_EQ(s.tree.size(), 3u);
    const auto& ids = s.tree.order();
    const Evaluation& screened = s.evaluations.at(ids[0]);
    EXPECT_EQ(s.tree.at(ids[0]).fidelity, screen);
    EXPECT_EQ(screened.fidelity, screen);
    EXPECT_EQ(s.tree.at(ids[0]).status, CandidateStatus::Rejected);
    EXPECT_EQ(screened.verdict, Verdict::Correct);
    EXPECT_NEAR(screened.objective, 2.0, 1e-9); // what it measured stays recorded
    std::set<std::string> rules;
    for (const VerdictReason& reason : screened.reasons)
        rules.insert(reason.rule);
    EXPECT_TRUE(rules.count("decide.screen"));
    int timed = 0;
    for (const ShapeResult& sr : screened.shapes)
        if (sr.timing) {
            ++timed;
            EXPECT_EQ(sr.timing->samples, 5);
            EXPECT_EQ(sr.shape, f.evaluator.problem().tuningShapes.front());
        }
    EXPECT_EQ(timed, 1);

    // The full protocol measured the same configuration again (no reuse of the screen) and became the best.
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 3);
    const Evaluation& full = s.evaluations.at(ids[1]);
    EXPECT_FALSE(full.fidelity.screen());
    EXPECT_EQ(s.tree.at(ids[1]).status, CandidateStatus::Accepted);
    EXPECT_GT(full.deviceMs, screened.deviceMs);
    EXPECT_GT(screened.deviceMs, 0);
    ASSERT_TRUE(r.best);
    EXPECT_EQ(*r.best, ids[1]);
    EXPECT_EQ(f.eventsOf(EventKind::BestChanged).size(), 1u);

    // The journal keeps what was asked for and what ran; a reloaded loop finds the same best.
    const Session reloaded = SessionStore::load(f.dir);
    EXPECT_EQ(reloaded.tree.at(ids[0]).fidelity, screen);
    EXPECT_EQ(reloaded.evaluations.at(ids[0]).fidelity, screen);
    EXPECT_DOUBLE_EQ(reloaded.evaluations.at(ids[0]).deviceMs, screened.deviceMs);
    EXPECT_EQ(bestAcceptedId(reloaded), ids[1]);
}

TEST(ResearchLoop, CompileFailuresAndDeviceLimitsNeverReachTheDevice)
{
    Fixture f("prune");
    f.evaluator.compileFails = [](const ParamValues& p) { return p.at("VEC") == 2; };
    // BLOCK=1024 x (24*4+4*8)=128 registers needs 131072 registers > 65536: pruned after compilation.
    // BLOCK=1024, VEC=8, ROWS=4 needs 256 KiB of shared memory: pruned before compilation.
    ScriptedAgentForTests agent({ cfg(256, 2), cfg(1024, 8, 4, 1), cfg(1024, 8, 1, 4), cfg(256, 4) });
    ResearchLoop loop(*f.store, f.evaluator, agent, sequentialOptions());
    loop.run();
    const Session& s = f.store->session();
    const auto& ids = s.tree.order();
    ASSERT_EQ(ids.size(), 4u);
    EXPECT_EQ(s.tree.at(ids[0]).status, CandidateStatus::CompileFailed);
    EXPECT_EQ(s.tree.at(ids[1]).status, CandidateStatus::Rejected);
    EXPECT_EQ(s.evaluations.at(ids[1]).reasons.front().rule, "device.registers");
    EXPECT_EQ(s.tree.at(ids[2]).status, CandidateStatus::Rejected);
    EXPECT_EQ(s.evaluations.at(ids[2]).reasons.front().rule, "device.shared-memory");
    EXPECT_EQ(s.tree.at(ids[3]).status, CandidateStatus::Accepted);
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 1); // only the runnable one was timed
    EXPECT_EQ(f.evaluator.compileCalls.load(), 3); // the shared-memory one was not even compiled
}

TEST(ResearchLoop, CompilePoolWorksAheadWhileOneThreadOwnsTheDevice)
{
    Fixture f("pipeline");
    int compiledWhileFirstOnDevice = 0;
    f.evaluator.onEvaluate = [&](int n, const Candidate&) {
        if (n != 1)
            return;
        // Hold the device on the first candidate: the pool must compile the next proposals meanwhile.
        for (int i = 0; i < 1000 && f.evaluator.compileCalls.load() < 4; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        compiledWhileFirstOnDevice = f.evaluator.compileCalls.load();
    };
    std::vector<ParamValues> script;
    for (std::int64_t b : { 32, 64, 128, 256, 512 })
        for (std::int64_t v : { 1, 2 })
            script.push_back(cfg(b, v));
    ScriptedAgentForTests agent(script);
    LoopOptions o;
    o.compileThreads = 2;
    o.pipelineDepth = 4;
    ResearchLoop loop(*f.store, f.evaluator, agent, o);
    loop.run();
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 10);
    EXPECT_EQ(f.evaluator.maxConcurrentEvaluate.load(), 1);
    EXPECT_GE(compiledWhileFirstOnDevice, 4);
}

// Every candidate the session holds is recorded or in flight, so what the budget still allows is its maximum less
// them, exactly, however the device's Started messages and the agent's calls interleave; without a maximum, nothing.
TEST(ResearchLoop, TellsTheAgentWhatItsBudgetStillAllows)
{
    for (const int max : { 0, 12 }) {
        Budget b;
        b.maxEvaluations = max;
        Fixture f("budget-told-" + std::to_string(max), "scripted", b);
        f.evaluator.onEvaluate
            = [](int, const Candidate&) { std::this_thread::sleep_for(std::chrono::milliseconds(3)); };
        ScriptedAgentForTests agent(fifteenConfigurations());
        LoopOptions o;
        o.compileThreads = 2;
        o.pipelineDepth = 4;
        ResearchLoop(*f.store, f.evaluator, agent, o).run();
        ASSERT_GE(agent.told.size(), 3u) << max;
        for (const auto& [left, held] : agent.told) {
            ASSERT_EQ(left.has_value(), max > 0) << held;
            if (left) {
                EXPECT_EQ(*left, max - static_cast<int>(held)) << held;
            }
        }
    }
}

TEST(ResearchLoop, StopsOnTheEvaluationBudget)
{
    Budget b;
    b.maxEvaluations = 4;
    Fixture f("budget", "scripted", b);
    ScriptedAgentForTests agent(fifteenConfigurations());
    LoopOptions o;
    o.pipelineDepth = 3;
    ResearchLoop loop(*f.store, f.evaluator, agent, o);
    const LoopResult r = loop.run();
    EXPECT_EQ(r.state, "finished");
    EXPECT_EQ(r.reason, "budget: 4 evaluations");
    EXPECT_EQ(recorded(f.store->session()), 4);
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 4);
}

TEST(ResearchLoop, StopsWhenConverged)
{
    Budget b;
    b.convergenceWindow = 3;
    Fixture f("converge", "scripted", b);
    f.evaluator.latencyUs = [&](const ParamValues& p, const Shape& s) {
        return f.evaluator.baselineUs(s) / (p.at("BLOCK") == 256 ? 2.0 : 1.2);
    };
    ScriptedAgentForTests agent({ cfg(256, 1), cfg(32, 1), cfg(64, 1), cfg(128, 1), cfg(512, 1), cfg(1024, 1) });
    ResearchLoop loop(*f.store, f.evaluator, agent, sequentialOptions());
    const LoopResult r = loop.run();
    EXPECT_EQ(r.reason, "converged: no accepted improvement in 3 evaluations");
    // The candidate already on the device when the window closes finishes and is recorded too.
    EXPECT_GE(recorded(f.store->session()), 4);
    EXPECT_LE(recorded(f.store->session()), 5);
}

TEST(ResearchLoop, StopsOnWallTime)
{
    Budget b;
    b.maxMinutes = 0.2 / 60.0; // 200 ms
    Fixture f("walltime", "scripted", b);
    f.evaluator.onEvaluate = [](int, const Candidate&) { std::this_thread::sleep_for(std::chrono::milliseconds(40)); };
    std::vector<ParamValues> script;
    for (std::int64_t bl : { 32, 64, 128, 256, 512 })
        for (std::int64_t v : { 1, 2, 4, 8 })
            for (std::int64_t u : { 1, 2, 4 })
                script.push_back(cfg(bl, v, u));
    ScriptedAgentForTests agent(script);
    ResearchLoop loop(*f.store, f.evaluator, agent, sequentialOptions());
    const auto t0 = std::chrono::steady_clock::now();
    const LoopResult r = loop.run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.reason.rfind("budget: ", 0), 0u);
    EXPECT_NE(r.reason.find("minutes"), std::string::npos);
    EXPECT_LT(s, 2.0);
    EXPECT_LT(f.evaluator.evaluateCalls.load(), 60);
    // What was left in the queue is marked, not lost: it stays unfinished for a later run.
    for (const auto& id : f.store->session().tree.order())
        if (!f.store->session().evaluations.count(id)) {
            EXPECT_EQ(f.store->session().tree.at(id).status, CandidateStatus::Proposed);
        }
}

TEST(ResearchLoop, UserStopFinishesTheEvaluationOnTheDeviceAndRecordsIt)
{
    Fixture f("userstop");
    ScriptedAgentForTests agent(fifteenConfigurations());
    ResearchLoop* loopPtr = nullptr;
    f.evaluator.onEvaluate = [&](int n, const Candidate&) {
        if (n == 3)
            loopPtr->requestStop("stopped by the user");
    };
    LoopOptions o;
    o.pipelineDepth = 4;
    ResearchLoop loop(*f.store, f.evaluator, agent, o);
    loopPtr = &loop;
    const LoopResult r = loop.run();
    EXPECT_EQ(r.state, "stopped");
    EXPECT_EQ(r.reason, "stopped by the user");
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 3);
    EXPECT_EQ(recorded(f.store->session()), 3);
    const auto states = f.eventsOf(EventKind::SessionState);
    ASSERT_FALSE(states.empty());
    EXPECT_EQ(states.back().data.at("state"), "stopped");
}

TEST(ResearchLoop, PauseHoldsTheDeviceAndResumeContinues)
{
    Fixture f("pause");
    std::vector<ParamValues> script;
    for (std::int64_t bl : { 32, 64, 128, 256 })
        script.push_back(cfg(bl, 1));
    ScriptedAgentForTests agent(script);
    ResearchLoop loop(*f.store, f.evaluator, agent, sequentialOptions());
    f.evaluator.onEvaluate = [&](int n, const Candidate&) {
        if (n == 2)
            loop.pause();
    };
    std::thread runner([&] { loop.run(); });
    for (int i = 0; i < 200 && !loop.isPaused(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(loop.isPaused());
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 2); // nothing new started while paused
    loop.resume();
    runner.join();
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 4);
    std::vector<std::string> states;
    for (const Event& e : f.eventsOf(EventKind::SessionState))
        states.push_back(e.data.at("state"));
    EXPECT_NE(std::find(states.begin(), states.end(), "paused"), states.end());
}

TEST(ResearchLoop, ResumeAfterKillMeasuresNothingTwice)
{
    Budget b;
    b.maxEvaluations = 12;
    Fixture f("kill", "scripted", b);
    const auto snapshot = freshDir("kill-snapshot");
    ScriptedAgentForTests agent(fifteenConfigurations());
    // kill -9 at an arbitrary instant = a copy of the directory taken while the loop runs: candidates are
    // proposed and compiling, one is on the device, some are recorded.
    std::atomic<int> decided { 0 };
    f.store->bus().subscribe([&](const Event& e) {
        if (e.kind == EventKind::CandidateAccepted || e.kind == EventKind::CandidateRejected)
            ++decided;
    });
    f.evaluator.onEvaluate = [&](int n, const Candidate&) {
        if (n != 6)
            return;
        // The device can run ahead of recording; let a few results land so the snapshot has some of each.
        for (int i = 0; i < 1000 && decided.load() < 3; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::filesystem::copy(f.dir, snapshot, std::filesystem::copy_options::recursive);
    };
    LoopOptions o;
    o.pipelineDepth = 3;
    {
        ResearchLoop loop(*f.store, f.evaluator, agent, o);
        loop.run();
    }
    LoadReport report;
    auto reopened = SessionStore::open(snapshot, &report);
    const Session before = reopened->session();
    std::set<ParamValues> recordedBefore;
    int unfinished = 0;
    for (const auto& id : before.tree.order()) {
        if (before.evaluations.count(id) && isTerminal(before.tree.at(id).status))
            recordedBefore.insert(before.tree.at(id).params);
        else
            ++unfinished;
    }
    // Evaluation 6 was on the device; up to five were recorded (recording may trail the device).
    ASSERT_GE(recordedBefore.size(), 3u);
    ASSERT_LE(recordedBefore.size(), 5u);
    ASSERT_GE(unfinished, 1);

    SyntheticEvaluatorForTests second;
    ScriptedAgentForTests agent2(fifteenConfigurations()); // a fresh agent proposes the same list again
    ResearchLoop resumed(*reopened, second, agent2, o);
    const LoopResult r = resumed.run();
    EXPECT_EQ(r.reason, "budget: 12 evaluations");
    for (const ParamValues& p : second.evaluatedParams())
        EXPECT_FALSE(recordedBefore.count(p)) << "re-measured a recorded configuration";
    const Session& after = reopened->session();
    EXPECT_EQ(recorded(after), 12);
    // The unfinished candidates of the killed run were evaluated first, under their original ids.
    for (const auto& id : before.tree.order())
        if (!(before.evaluations.count(id) && isTerminal(before.tree.at(id).status))) {
            EXPECT_TRUE(isTerminal(after.tree.at(id).status)) << id;
        }
    std::filesystem::remove_all(snapshot);
}

// The jump rule is the referee's (physics.suspicious-jump): the loop hands the evaluator the session's current best
// and review factor with every evaluation, and decide() adds no jump rule of its own.
TEST(ResearchLoop, HandsTheEvaluatorTheCurrentBestAndItsReviewFactor)
{
    SyntheticEvaluatorForTests evaluator;
    const auto dir = freshDir("best-handed-over");
    Session header = sessionHeader(evaluator, "scripted");
    header.settings.reviewJumpFactor = 1.7;
    auto store = SessionStore::create(dir, header);
    evaluator.latencyUs = [&](const ParamValues& p, const Shape& s) {
        return evaluator.baselineUs(s) / (p.at("BLOCK") == 32 ? 1.5 : 4.5); // the second is 3x the first
    };
    ScriptedAgentForTests agent({ cfg(32, 1), cfg(128, 1) });
    ResearchLoop loop(*store, evaluator, agent, sequentialOptions());
    loop.run();
    const Session& s = store->session();
    const auto ids = s.tree.order();
    ASSERT_EQ(ids.size(), 2u);
    const auto bests = evaluator.bestsHandedOver();
    ASSERT_EQ(bests.size(), 2u);
    EXPECT_FALSE(bests[0]) << "nothing accepted yet";
    ASSERT_TRUE(bests[1]);
    EXPECT_DOUBLE_EQ(bests[1]->objective, s.evaluations.at(ids[0]).objective);
    EXPECT_DOUBLE_EQ(bests[1]->reviewJumpFactor, 1.7);
    // The synthetic evaluator has no referee: nothing flags the 3x jump, and decide() does not either.
    EXPECT_EQ(s.tree.at(ids[1]).status, CandidateStatus::Accepted);
    for (const VerdictReason& r : s.evaluations.at(ids[1]).reasons)
        EXPECT_EQ(r.rule.find("jump"), std::string::npos) << r.rule;
    std::filesystem::remove_all(dir);
}

TEST(ResearchLoop, FlaggedCandidateWaitsForReviewAndApprovalAcceptsIt)
{
    Fixture f("review");
    f.evaluator.flag = [](const ParamValues& p) {
        return p.at("BLOCK") == 256 ? std::string("writes through a pointer it was not given") : std::string();
    };
    ScriptedAgentForTests agent({ cfg(128, 1), cfg(256, 4) });
    ResearchLoop loop(*f.store, f.evaluator, agent, sequentialOptions());
    loop.run();
    const Session& s = f.store->session();
    const auto ids = s.tree.order();
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_EQ(s.tree.at(ids[1]).status, CandidateStatus::PendingReview);
    EXPECT_EQ(*loop.best(), ids[0]); // never auto-accepted
    loop.review(ids[1], true, "the pointer is the workspace");
    EXPECT_EQ(s.tree.at(ids[1]).status, CandidateStatus::Accepted);
    EXPECT_EQ(*loop.best(), ids[1]);
    EXPECT_EQ(s.reviews.size(), 1u);
}

TEST(ResearchLoop, ProposalsNeedingReviewWaitUntilApproved)
{
    Fixture f("needsreview");
    ScriptedAgentForTests agent({ cfg(128, 1) });
    agent.needsReview = true;
    ResearchLoop loop(*f.store, f.evaluator, agent, sequentialOptions());
    std::thread runner([&] { loop.run(); });
    for (int i = 0; i < 200 && f.store->events().size() < 4; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 0);
    loop.review("c0001", true, "looks right");
    runner.join();
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 1);
    EXPECT_EQ(f.store->session().tree.at("c0001").status, CandidateStatus::Accepted);
}

TEST(ResearchLoop, RollbackBranchesFromTheNodeTheEngineerPicks)
{
    Fixture f("branch");
    f.evaluator.latencyUs = [&](const ParamValues& p, const Shape& s) {
        return f.evaluator.baselineUs(s) / (p.at("BLOCK") == 32 ? 2.0 : 1.0 + p.at("VEC") * 0.01);
    };
    ScriptedAgentForTests first({ cfg(32, 1), cfg(64, 1), cfg(128, 1) });
    ScriptedAgentForTests second({ cfg(256, 1), cfg(512, 1) });
    {
        ResearchLoop loop(*f.store, f.evaluator, first, sequentialOptions());
        loop.run();
        EXPECT_EQ(f.store->session().tree.head(), "c0001"); // the best
        loop.branchFrom("c0002", "try again from the second node");
        EXPECT_EQ(f.store->session().tree.head(), "c0002");
    }
    ResearchLoop loop(*f.store, f.evaluator, second, sequentialOptions());
    loop.run();
    const Session& s = f.store->session();
    EXPECT_EQ(s.tree.at("c0004").parentId, "c0002");
    EXPECT_EQ(s.tree.at("c0005").parentId, "c0002");
    EXPECT_EQ(s.tree.size(), 5u); // nothing deleted
    EXPECT_EQ(s.tree.at("c0001").status, CandidateStatus::Accepted);
}

TEST(ResearchLoop, BudgetOverrideExtendsAResumedSession)
{
    Budget b;
    b.maxEvaluations = 2;
    Fixture f("override", "scripted", b);
    ScriptedAgentForTests agent({ cfg(32, 1), cfg(64, 1), cfg(128, 1), cfg(256, 1), cfg(512, 1) });
    {
        ResearchLoop loop(*f.store, f.evaluator, agent, sequentialOptions());
        EXPECT_EQ(loop.run().reason, "budget: 2 evaluations");
    }
    LoopOptions o = sequentialOptions();
    Budget more;
    more.maxEvaluations = 4;
    o.budgetOverride = more;
    ResearchLoop loop(*f.store, f.evaluator, agent, o);
    EXPECT_EQ(loop.run().reason, "budget: 4 evaluations");
    EXPECT_EQ(f.evaluator.evaluateCalls.load(), 4);
}

namespace {

// A pool of two GPU models as the loop sees it: BLOCK 64 is measured on model "B", everything else on "A".
class TwoModelEvaluator final : public Evaluator {
public:
    explicit TwoModelEvaluator(SyntheticEvaluatorForTests& inner)
        : m_inner(inner)
    {
    }
    const DeviceInfo& device() const override { return m_inner.device(); }
    const Problem& problem() const override { return m_inner.problem(); }
    CompileReport compile(const Candidate& c) override { return m_inner.compile(c); }
    Evaluation evaluate(const Candidate& c, const EvaluateOptions& opt, const CancelToken& cancel) override
    {
        Evaluation e = m_inner.evaluate(c, opt, cancel);
        bestsByGpu.push_back(opt.bestByGpu);
        const bool onB = c.params.count("BLOCK") && c.params.at("BLOCK") == 64;
        e.measuredOn = { onB ? "ssh:b" : "local", onB ? "GPU model B" : "GPU model A", "" };
        return e;
    }

    std::vector<std::map<std::string, CurrentBest>> bestsByGpu; // what each evaluate() was told, in order

private:
    SyntheticEvaluatorForTests& m_inner;
};

} // namespace

TEST(ResearchLoop, ADecisionComparesOnlyMeasurementsOfOneGpuModel)
{
    Fixture f("two-models");
    f.evaluator.latencyUs = [&](const ParamValues& p, const Shape& s) {
        const double base = f.evaluator.baselineUs(s);
        switch (p.at("BLOCK")) {
        case 32:
            return base / 1.5; // on A: the first best of A
        case 64:
            return base / 1.3; // on B: slower than A's best, but B's first: accepted on B's leaderboard
        default:
            return base / 1.2; // on A: slower than A's best -> rejected
        }
    };
    TwoModelEvaluator pool(f.evaluator);
    ScriptedAgentForTests agent({ cfg(32, 1), cfg(64, 1), cfg(128, 1) });
    ResearchLoop loop(*f.store, pool, agent, sequentialOptions());
    loop.run();
    const Session& s = f.store->session();
    const auto& ids = s.tree.order();
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(s.tree.at(ids[0]).status, CandidateStatus::Accepted);
    EXPECT_EQ(s.tree.at(ids[1]).status, CandidateStatus::Accepted) << "1.3x is not compared with another model's 1.5x";
    EXPECT_EQ(s.tree.at(ids[2]).status, CandidateStatus::Rejected) << "1.2x on A loses to A's 1.5x";
    EXPECT_EQ(s.evaluations.at(ids[1]).measuredOn.gpu, "GPU model B");
    // The referee is handed each model's own best, so a jump is judged against the model that measures it.
    ASSERT_EQ(pool.bestsByGpu.size(), 3u);
    EXPECT_TRUE(pool.bestsByGpu[0].empty());
    EXPECT_EQ(pool.bestsByGpu[1].size(), 1u);
    ASSERT_EQ(pool.bestsByGpu[2].size(), 2u);
    EXPECT_DOUBLE_EQ(pool.bestsByGpu[2].at("GPU model A").objective, s.evaluations.at(ids[0]).objective);
    EXPECT_DOUBLE_EQ(pool.bestsByGpu[2].at("GPU model B").objective, s.evaluations.at(ids[1]).objective);

    // The GPU that measured it is in the journal, read back as written.
    const Session readBack = SessionStore::load(f.dir);
    EXPECT_EQ(readBack.evaluations.at(ids[1]).measuredOn.worker, "ssh:b");
    EXPECT_EQ(readBack.evaluations.at(ids[1]).measuredOn.gpu, "GPU model B");
}
