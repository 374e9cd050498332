// Shape regimes (issue 20): problem.json "regimes", the decision per regime, and the loop keeping a best per regime.
#include "core/current_best.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/research_loop.h"
#include "tests/core/loop_test_support.h"

#include <gtest/gtest.h>
#include <set>

using namespace kl;
using namespace kl::testonly;

namespace {

Json rmsnormLikeJson()
{
    return Json::parse(R"JSON({
      "name": "rms", "dims": [{"name": "T", "min": 1, "max": 65536}, {"name": "H", "min": 256, "max": 16384}],
      "tensors": [{"name": "y", "dtype": "f32", "shape": ["T", "H"], "role": "output"},
                  {"name": "x", "dtype": "f32", "shape": ["T", "H"], "role": "input"}],
      "tuning_shapes": [{"dims": {"T": 16, "H": 4096}}, {"dims": {"T": 8192, "H": 4096}}],
      "verify_shapes": [{"dims": {"T": 1, "H": 256}}, {"dims": {"T": 65536, "H": 16384}}],
      "regimes": [{"name": "decode", "when": "T <= 256"}, {"name": "prefill", "when": "T > 256"}]})JSON");
}

std::string refusal(const Json& j)
{
    try {
        problemFromJson(j, "p.json");
    } catch (const InputError& e) {
        return e.what();
    }
    return "accepted";
}

Json withRegimes(const char* regimes)
{
    Json j = rmsnormLikeJson();
    j["regimes"] = Json::parse(regimes);
    return j;
}

ShapeResult timedShape(std::int64_t t, double speedup, bool heldOut = false, double weight = 1)
{
    ShapeResult r;
    r.shape.dims = { { "T", t }, { "H", 4096 } };
    r.shape.weight = weight;
    r.heldOut = heldOut;
    r.correct = true;
    r.timing = TimingStats {};
    r.speedup = speedup;
    r.speedupCiLow = speedup * 0.99;
    r.speedupCiHigh = speedup * 1.01;
    return r;
}

std::vector<Regime> decodePrefill()
{
    return { { "decode", Expr::parse("T <= 256") }, { "prefill", Expr::parse("T > 256") } };
}

::testing::AssertionResult hasText(const std::string& text, const std::string& part)
{
    if (text.find(part) != std::string::npos)
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "'" << text << "' lacks '" << part << "'";
}

} // namespace

TEST(RegimeFormat, ParsedWithTheirConditionsAndRoundTripped)
{
    const Problem p = problemFromJson(rmsnormLikeJson(), "p.json");
    ASSERT_EQ(p.regimes.size(), 2u);
    EXPECT_EQ(p.regimes[0].name, "decode");
    EXPECT_EQ(p.regimes[1].condition.text(), "T > 256");
    Shape s;
    s.dims = { { "T", 256 }, { "H", 4096 } };
    EXPECT_EQ(p.regimesOf(s), std::vector<std::size_t> { 0 });
    s.dims["T"] = 257;
    EXPECT_EQ(p.regimesOf(s), std::vector<std::size_t> { 1 });
    const Problem q = problemFromJson(toJson(p), "again");
    ASSERT_EQ(q.regimes.size(), 2u);
    EXPECT_EQ(q.regimes[0].condition.text(), "T <= 256");
    Json none = rmsnormLikeJson();
    none.erase("regimes");
    EXPECT_TRUE(problemFromJson(none, "p.json").regimes.empty());
}

TEST(RegimeFormat, ErrorsNameTheFieldAndTheShapeThatBreaksThePartition)
{
    // A gap at a tuning shape, an overlap at a verify shape.
    EXPECT_TRUE(hasText(
        refusal(withRegimes(R"([{"name": "decode", "when": "T <= 256"}, {"name": "prefill", "when": "T > 10000"}])")),
        "p.json.regimes: tuning shape H=4096,T=8192 is in no regime (a gap; regimes: decode, prefill)"));
    EXPECT_TRUE(hasText(
        refusal(withRegimes(R"([{"name": "decode", "when": "T <= 256"}, {"name": "prefill", "when": "T >= 1"}])")),
        "p.json.regimes: tuning shape H=4096,T=16 is in decode and prefill (regimes overlap)"));
    // A regime no tuning shape falls in is not an error (a session tuned at a trace's decode shapes keeps the
    // problem's regimes); nothing times it, so its winner stays the fallback.
    EXPECT_NO_THROW(problemFromJson(
        withRegimes(R"([{"name": "decode", "when": "T <= 1"}, {"name": "rest", "when": "T > 1"}])"), "p.json"));
    EXPECT_TRUE(hasText(
        refusal(withRegimes(R"([{"name": "decode", "when": "B <= 256"}, {"name": "prefill", "when": "T > 256"}])")),
        "p.json.regimes[0].when: 'B <= 256' names 'B', which is not a dim (dims: T, H)"));
    EXPECT_TRUE(hasText(
        refusal(withRegimes(R"([{"name": "Decode!", "when": "T <= 256"}, {"name": "prefill", "when": "T > 256"}])")),
        "p.json.regimes[0].name: 'Decode!' is not a name"));
    EXPECT_TRUE(
        hasText(refusal(withRegimes(R"([{"name": "a", "when": "T <= 256"}, {"name": "a", "when": "T > 256"}])")),
            "p.json.regimes[1].name: regime 'a' is declared twice"));
    EXPECT_TRUE(hasText(refusal(withRegimes(R"([{"name": "a"}])")), "p.json.regimes[0]"));
    EXPECT_TRUE(hasText(refusal(withRegimes(R"(["T <= 256"])")), "p.json.regimes[0]: expected an object"));
    EXPECT_TRUE(hasText(refusal(withRegimes(R"([{"name": "a", "when": "T <= "}])")), "p.json.regimes[0].when"));
}

TEST(RegimeFormat, PartitionErrorOnAnyShapeList)
{
    const Problem p = problemFromJson(rmsnormLikeJson(), "p.json");
    Shape in, out;
    in.dims = { { "T", 3 }, { "H", 256 } };
    out.dims = { { "H", 256 } }; // T missing: the condition cannot be evaluated
    EXPECT_EQ(regimePartitionError(p, { in }, "sampled shape"), "");
    EXPECT_TRUE(hasText(regimePartitionError(p, { in, out }, "sampled shape"), "sampled shape H=256: "));
    Problem none = p;
    none.regimes.clear();
    EXPECT_EQ(regimePartitionError(none, { out }, "sampled shape"), "");
}

TEST(RegimeSettings, OldSessionsReadAsOneRegimeAndBadValuesNameTheField)
{
    EXPECT_EQ(SessionSettings {}.regimes, "problem");
    EXPECT_EQ(
        settingsFromJson(Json::parse(R"({"objective": "weighted-geomean-speedup"})"), "session.json.settings").regimes,
        "single");
    EXPECT_EQ(settingsFromJson(toJson(SessionSettings {}), "s").regimes, "problem");
    try {
        settingsFromJson(Json::parse(R"({"regimes": "learned-ish"})"), "session.json.settings");
        FAIL() << "accepted an unknown regime setting";
    } catch (const InputError& e) {
        EXPECT_TRUE(hasText(std::string(e.what()), "session.json.settings.regimes: 'learned-ish'"));
    }
}

TEST(RegimeSettings, EvaluationRecordsTheRegimesItWonAndOldRecordsHaveNone)
{
    Evaluation e;
    e.candidateId = "c0002";
    e.regimes.push_back({ "decode", "T <= 256", 1.4, 1.38, 1.42, 3, 5, true });
    e.regimes.push_back({ "prefill", "T > 256", 0.9, 0.89, 0.91, 2, 4, false });
    const Evaluation back = evaluationFromJson(toJson(e), "evaluation.json");
    ASSERT_EQ(back.regimes.size(), 2u);
    EXPECT_EQ(back.regimes[0].name, "decode");
    EXPECT_EQ(back.regimes[0].condition, "T <= 256");
    EXPECT_TRUE(back.regimes[0].won);
    EXPECT_FALSE(back.regimes[1].won);
    EXPECT_DOUBLE_EQ(back.regimes[0].objectiveCiLow, 1.38);
    EXPECT_EQ(back.regimes[1].timedShapes, 2);
    EXPECT_EQ(back.regimes[1].verifiedShapes, 4);
    Json old = toJson(e);
    old.erase("regimes");
    EXPECT_TRUE(evaluationFromJson(old, "evaluation.json").regimes.empty());
    old["regimes"] = Json::array({ Json::object({ { "won", true } }) });
    EXPECT_THROW(evaluationFromJson(old, "evaluation.json"), InputError);
}

TEST(RegimeObjective, ComputedOverTheRegimesTuningShapesOnly)
{
    Evaluation e;
    e.shapes = { timedShape(16, 2.0), timedShape(128, 1.5), timedShape(8192, 0.8), timedShape(64, 9.0, true) };
    const auto regimes = decodePrefill();
    const auto decode = computeObjective(e, "geomean-speedup", nullptr, &regimes[0]);
    ASSERT_TRUE(decode);
    EXPECT_NEAR(decode->value, std::sqrt(3.0), 1e-12); // the held-out 9x is not in it
    const auto prefill = computeObjective(e, "geomean-speedup", nullptr, &regimes[1]);
    ASSERT_TRUE(prefill);
    EXPECT_NEAR(prefill->value, 0.8, 1e-12);
    e.shapes.pop_back();
    e.shapes.pop_back();
    e.shapes.pop_back(); // only T=16 left
    std::string why;
    EXPECT_FALSE(computeObjective(e, "geomean-speedup", &why, &regimes[1]));
    EXPECT_EQ(why, "no timed shape in regime prefill");
}

TEST(RegimeDecide, AcceptedWhenItImprovesSomeRegimesBestAndWinsOnlyThose)
{
    Evaluation e;
    e.verdict = Verdict::Correct;
    e.shapes = { timedShape(16, 1.5), timedShape(8192, 1.1), timedShape(100000 / 100, 0.5, true) };
    e.shapes[2].timing.reset(); // a held-out shape, verified only
    DecideInput in;
    in.evaluation = &e;
    in.regimes = { { decodePrefill()[0], ObjectiveValue { 1.2, 1.19, 1.21 }, "c0001" },
        { decodePrefill()[1], ObjectiveValue { 1.3, 1.29, 1.31 }, "c0001" } };
    in.best = ObjectiveValue { 1.25, 1.24, 1.26 }; // the single objective would reject it: 1.28 vs 1.25 is close
    const Decision d = decide(in);
    EXPECT_EQ(d.verdict, Verdict::Accepted);
    ASSERT_EQ(d.regimes.size(), 2u);
    EXPECT_TRUE(d.regimes[0].won);
    EXPECT_FALSE(d.regimes[1].won);
    EXPECT_NEAR(d.regimes[0].objective, 1.5, 1e-12);
    EXPECT_EQ(d.regimes[0].timedShapes, 1);
    EXPECT_EQ(d.regimes[1].verifiedShapes, 2); // T=8192 and the held-out T=1000
    EXPECT_EQ(d.regimes[0].condition, "T <= 256");
    ASSERT_FALSE(d.reasons.empty());
    EXPECT_EQ(d.reasons.back().rule, "decide.faster");
    EXPECT_TRUE(hasText(d.reasons.back().message, "decode vs its best c0001: 1.250x"));
    const Evaluation rec = applyDecision(e, d);
    ASSERT_EQ(rec.regimes.size(), 2u);
    EXPECT_TRUE(rec.regimes[0].won);

    // Slower everywhere: rejected as slower; inside the interval somewhere: not significant.
    in.regimes[0].best = ObjectiveValue { 1.6, 1.59, 1.61 };
    in.regimes[1].best = ObjectiveValue { 1.2, 1.19, 1.21 };
    const Decision slower = decide(in);
    EXPECT_EQ(slower.verdict, Verdict::Rejected);
    EXPECT_TRUE(hasRule(slower, "decide.slower"));
    in.regimes[1].best = ObjectiveValue { 1.1, 1.09, 1.11 };
    EXPECT_TRUE(hasRule(decide(in), "decide.not-significant"));

    // Wrong anywhere it was verified, even in another regime: rejected, wins nothing.
    in.regimes[0].best.reset();
    e.shapes[2].correct = false;
    const Decision wrong = decide(in);
    EXPECT_EQ(wrong.verdict, Verdict::Rejected);
    EXPECT_TRUE(hasRule(wrong, "decide.incorrect"));
    EXPECT_TRUE(wrong.regimes.empty());

    // Flagged: waits for review and wins nothing yet.
    e.shapes[2].correct = true;
    e.reasons.push_back({ "referee.flag", "looks odd", 0, false });
    const Decision flagged = decide(in);
    EXPECT_EQ(flagged.verdict, Verdict::PendingReview);
    for (const auto& r : flagged.regimes)
        EXPECT_FALSE(r.won);
}

namespace {

struct RegimeFixture {
    explicit RegimeFixture(const std::string& name, const std::string& regimes = "problem")
        : dir(freshDir(name))
    {
        evaluator.mutableProblem().regimes = decodePrefill();
        Session header = sessionHeader(evaluator, "scripted");
        header.settings.regimes = regimes;
        store = SessionStore::create(dir, header);
        // BLOCK picks the scenario; T=16 is the decode tuning shape, T=8192 (weight 3) the prefill one.
        evaluator.latencyUs = [this](const ParamValues& p, const Shape& s) {
            const double base = evaluator.baselineUs(s);
            const bool decode = s.dims.at("T") <= 256;
            switch (p.at("BLOCK")) {
            case 32:
                return base / 1.5; // A: 1.5x everywhere
            case 64:
                return base / (decode ? 2.0 : 1.2); // B: the decode specialist (single objective 1.37 < 1.5)
            case 128:
                return base / (decode ? 1.0 : 1.7); // C: the prefill specialist
            case 256:
                return base / (decode ? 1.9 : 1.6); // D: second to both
            default:
                return base / 0.9; // E: slower than the baseline
            }
        };
    }
    ~RegimeFixture() { std::filesystem::remove_all(dir); }

    std::filesystem::path dir;
    SyntheticEvaluatorForTests evaluator;
    std::unique_ptr<SessionStore> store;
};

LoopOptions oneAtATime()
{
    LoopOptions o;
    o.compileThreads = 1;
    o.pipelineDepth = 1;
    return o;
}

} // namespace

TEST(RegimeLoop, KeepsABestPerRegimeAndRecordsWhichRegimesEachCandidateWon)
{
    RegimeFixture f("regime-loop");
    ScriptedAgentForTests agent({ cfg(32, 1), cfg(64, 1), cfg(128, 1), cfg(256, 1), cfg(512, 1) });
    ResearchLoop loop(*f.store, f.evaluator, agent, oneAtATime());
    const LoopResult r = loop.run();
    const Session& s = f.store->session();
    ASSERT_EQ(s.tree.size(), 5u) << r.reason;
    const auto& ids = s.tree.order();
    EXPECT_EQ(s.tree.at(ids[0]).status, CandidateStatus::Accepted); // A beats the baseline in both
    EXPECT_EQ(s.tree.at(ids[1]).status, CandidateStatus::Accepted); // B: decode
    EXPECT_EQ(s.tree.at(ids[2]).status, CandidateStatus::Accepted); // C: prefill
    EXPECT_EQ(s.tree.at(ids[3]).status, CandidateStatus::Rejected); // D: below B in decode, below C in prefill
    EXPECT_EQ(s.tree.at(ids[4]).status, CandidateStatus::Rejected);
    auto won = [&](const CandidateId& id) {
        std::set<std::string> out;
        for (const RegimeResult& x : s.evaluations.at(id).regimes)
            if (x.won)
                out.insert(x.name);
        return out;
    };
    EXPECT_EQ(won(ids[0]), (std::set<std::string> { "decode", "prefill" }));
    EXPECT_EQ(won(ids[1]), std::set<std::string> { "decode" });
    EXPECT_EQ(won(ids[2]), std::set<std::string> { "prefill" });
    EXPECT_TRUE(won(ids[3]).empty());
    EXPECT_NEAR(s.evaluations.at(ids[1]).regimes[0].objective, 2.0, 1e-9);

    const auto winners = regimeWinners(s);
    ASSERT_EQ(winners.size(), 2u);
    EXPECT_EQ(winners[0].regime, "decode");
    EXPECT_EQ(winners[0].condition, "T <= 256");
    EXPECT_EQ(winners[0].winner, ids[1]);
    EXPECT_EQ(winners[1].winner, ids[2]);
    EXPECT_NEAR(winners[1].result.objective, 1.7, 1e-9);

    // The journal's BestChanged events name the regimes each new best won.
    std::vector<Json> bestRegimes;
    for (const Event& e : f.store->events())
        if (e.kind == EventKind::BestChanged)
            bestRegimes.push_back(e.data.value("regimes", Json()));
    ASSERT_EQ(bestRegimes.size(), 3u);
    EXPECT_EQ(bestRegimes[1], Json::array({ "decode" }));
    EXPECT_EQ(bestRegimes[2], Json::array({ "prefill" }));

    // The evaluator was asked to draw held-out shapes inside each regime.
    const auto handed = f.evaluator.regimesHandedOver();
    ASSERT_FALSE(handed.empty());
    ASSERT_EQ(handed.back().size(), 2u);
    EXPECT_EQ(handed.back()[1].name, "prefill");

    // The reloaded session says the same; a resumed loop judges against the same regime bests.
    const Session reloaded = SessionStore::load(f.dir);
    const auto again = regimeWinners(reloaded);
    ASSERT_EQ(again.size(), 2u);
    EXPECT_EQ(again[0].winner, ids[1]);
    EXPECT_EQ(again[1].winner, ids[2]);
    ScriptedAgentForTests more({ cfg(256, 2), cfg(64, 4) }); // D again (VEC differs), below both bests
    f.evaluator.latencyUs = [&f](const ParamValues& p, const Shape& shape) {
        const double base = f.evaluator.baselineUs(shape);
        const bool decode = shape.dims.at("T") <= 256;
        return p.at("VEC") == 2 ? base / (decode ? 1.9 : 1.6) : base / (decode ? 2.4 : 1.0);
    };
    ResearchLoop resumed(*f.store, f.evaluator, more, oneAtATime());
    resumed.run();
    const Session& after = f.store->session();
    ASSERT_EQ(after.tree.size(), 7u);
    EXPECT_EQ(after.tree.at(after.tree.order()[5]).status, CandidateStatus::Rejected);
    EXPECT_EQ(after.tree.at(after.tree.order()[6]).status, CandidateStatus::Accepted);
    EXPECT_EQ(regimeWinners(after)[0].winner, after.tree.order()[6]);
    EXPECT_EQ(regimeWinners(after)[1].winner, ids[2]);
}

TEST(RegimeLoop, TheSingleSettingKeepsOneObjectiveOverEveryShape)
{
    RegimeFixture f("regime-single", "single");
    ScriptedAgentForTests agent({ cfg(32, 1), cfg(64, 1), cfg(128, 1) });
    ResearchLoop loop(*f.store, f.evaluator, agent, oneAtATime());
    loop.run();
    const Session& s = f.store->session();
    ASSERT_EQ(s.tree.size(), 3u);
    const auto& ids = s.tree.order();
    EXPECT_EQ(s.tree.at(ids[0]).status, CandidateStatus::Accepted);
    EXPECT_EQ(s.tree.at(ids[1]).status, CandidateStatus::Rejected); // 2.0 and 1.2 weighted 1:3 is 1.37x < 1.5x
    EXPECT_EQ(s.tree.at(ids[2]).status, CandidateStatus::Rejected); // 1.0 and 1.7 weighted 1:3 is 1.49x < 1.5x
    for (const auto& id : ids)
        EXPECT_TRUE(s.evaluations.at(id).regimes.empty());
    EXPECT_TRUE(regimeWinners(s).empty());
    EXPECT_TRUE(f.evaluator.regimesHandedOver().back().empty());
}
