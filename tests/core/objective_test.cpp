#include "core/errors.h"
#include "core/loop_objective.h"
#include "tests/core/loop_test_support.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace kl;
using kl::testonly::hasRule;

namespace {

ShapeResult timedShape(std::int64_t t, double weight, double speedup, double relCi = 0.01, bool correct = true)
{
    ShapeResult r;
    r.shape.dims = { { "T", t }, { "H", 4096 } };
    r.shape.weight = weight;
    r.correct = correct;
    r.timing = TimingStats {};
    r.timing->medianUs = 10 / speedup;
    r.speedup = speedup;
    r.speedupCiLow = speedup * (1 - relCi);
    r.speedupCiHigh = speedup * (1 + relCi);
    return r;
}

Evaluation evaluationWith(std::vector<ShapeResult> shapes, Verdict v = Verdict::Correct)
{
    Evaluation e;
    e.verdict = v;
    e.shapes = std::move(shapes);
    return e;
}

} // namespace

TEST(Objective, WeightedGeomeanUsesWorkloadWeights)
{
    const Evaluation e = evaluationWith({ timedShape(8192, 3, 2.0), timedShape(16, 1, 1.0) });
    const auto v = computeObjective(e, "weighted-geomean-speedup");
    ASSERT_TRUE(v);
    EXPECT_NEAR(v->value, std::pow(2.0, 0.75), 1e-12);
    const auto g = computeObjective(e, "geomean-speedup");
    ASSERT_TRUE(g);
    EXPECT_NEAR(g->value, std::sqrt(2.0), 1e-12);
    const auto m = computeObjective(e, "min-speedup");
    ASSERT_TRUE(m);
    EXPECT_NEAR(m->value, 1.0, 1e-12);
    EXPECT_LT(v->ciLow, v->value);
    EXPECT_GT(v->ciHigh, v->value);
}

TEST(Objective, HeldOutShapesAreNotPartOfTheObjective)
{
    ShapeResult held = timedShape(77, 1, 100.0);
    held.heldOut = true;
    const Evaluation e = evaluationWith({ timedShape(8192, 1, 2.0), held });
    EXPECT_NEAR(computeObjective(e, "weighted-geomean-speedup")->value, 2.0, 1e-12);
}

TEST(Objective, UnknownObjectiveIsAnInputError)
{
    const Evaluation e = evaluationWith({ timedShape(8192, 1, 2.0) });
    EXPECT_THROW(computeObjective(e, "fastest-please"), InputError);
}

TEST(Objective, MissingSpeedupGivesNoObjective)
{
    ShapeResult s = timedShape(8192, 1, 2.0);
    s.speedup = 0;
    std::string why;
    EXPECT_FALSE(computeObjective(evaluationWith({ s }), "weighted-geomean-speedup", &why));
    EXPECT_NE(why.find("T=8192"), std::string::npos);
}

TEST(Decide, FasterThanBaselineWithTightIntervalIsAccepted)
{
    const Evaluation e = evaluationWith({ timedShape(8192, 3, 1.5), timedShape(16, 1, 1.2) });
    const Decision d = decide({ &e, "weighted-geomean-speedup", std::nullopt, "" });
    EXPECT_EQ(d.verdict, Verdict::Accepted);
    EXPECT_TRUE(d.improves);
    EXPECT_TRUE(hasRule(d, "decide.faster"));
}

TEST(Decide, ImprovementInsideTheConfidenceIntervalIsRejected)
{
    const Evaluation e = evaluationWith({ timedShape(8192, 1, 1.51, 0.02) });
    const ObjectiveValue best { 1.5, 1.5 * 0.98, 1.5 * 1.02 };
    const Decision d = decide({ &e, "weighted-geomean-speedup", best, "c0003" });
    EXPECT_EQ(d.verdict, Verdict::Rejected);
    EXPECT_FALSE(d.improves);
    ASSERT_TRUE(hasRule(d, "decide.not-significant"));
    EXPECT_NE(d.reasons.back().message.find("c0003"), std::string::npos);
}

TEST(Decide, SlowerThanBestIsRejectedAsSlower)
{
    const Evaluation e = evaluationWith({ timedShape(8192, 1, 1.2) });
    const Decision d = decide({ &e, "weighted-geomean-speedup", ObjectiveValue { 1.5, 1.49, 1.51 }, "c0002" });
    EXPECT_EQ(d.verdict, Verdict::Rejected);
    EXPECT_TRUE(hasRule(d, "decide.slower"));
}

TEST(Decide, WrongOnAnyVerificationShapeIsRejectedEvenWhenFaster)
{
    ShapeResult edge;
    edge.shape.dims = { { "T", 1 }, { "H", 256 } };
    edge.heldOut = true;
    edge.correct = false;
    const Evaluation e = evaluationWith({ timedShape(8192, 1, 3.0), edge });
    const Decision d = decide({ &e, "weighted-geomean-speedup", std::nullopt, "" });
    EXPECT_EQ(d.verdict, Verdict::Rejected);
    ASSERT_TRUE(hasRule(d, "decide.incorrect"));
    EXPECT_NE(d.reasons.back().message.find("T=1"), std::string::npos);
}

TEST(Decide, RefereeFlagSendsAnImprovementToReviewNeverToAccepted)
{
    Evaluation e = evaluationWith({ timedShape(8192, 1, 1.8) });
    e.reasons.push_back({ "referee.side-stream", "launches on a second stream", 12, false });
    const Decision d = decide({ &e, "weighted-geomean-speedup", std::nullopt, "" });
    EXPECT_EQ(d.verdict, Verdict::PendingReview);
    EXPECT_TRUE(hasRule(d, "referee.side-stream"));

    Evaluation pending = evaluationWith({ timedShape(8192, 1, 1.8) }, Verdict::PendingReview);
    EXPECT_EQ(decide({ &pending, "weighted-geomean-speedup", std::nullopt, "" }).verdict, Verdict::PendingReview);

    Evaluation slowFlagged = evaluationWith({ timedShape(8192, 1, 0.8) });
    slowFlagged.reasons.push_back({ "referee.side-stream", "launches on a second stream", 12, false });
    EXPECT_EQ(decide({ &slowFlagged, "weighted-geomean-speedup", std::nullopt, "" }).verdict, Verdict::Rejected);
}

TEST(Decide, BlockingRefereeReasonRejects)
{
    Evaluation e = evaluationWith({ timedShape(8192, 1, 1.8) });
    e.reasons.push_back({ "static.timer-read", "reads %globaltimer", 3, true });
    const Decision d = decide({ &e, "weighted-geomean-speedup", std::nullopt, "" });
    EXPECT_EQ(d.verdict, Verdict::Rejected);
    EXPECT_TRUE(hasRule(d, "static.timer-read"));
}

// The jump rule is the referee's alone (physics.suspicious-jump, fed the session's best): decide holds a flagged
// jump for review and adds no jump rule of its own.
TEST(Decide, TheRefereesSuspiciousJumpWaitsForReviewAndDecideAddsNoSecondJumpRule)
{
    Evaluation e = evaluationWith({ timedShape(8192, 1, 5.0) });
    e.reasons.push_back({ "physics.suspicious-jump", "objective 5.000 is 2.50x the current best", 0, false });
    const Decision d = decide({ &e, "weighted-geomean-speedup", ObjectiveValue { 2.0, 1.98, 2.02 }, "c0001" });
    EXPECT_EQ(d.verdict, Verdict::PendingReview);
    EXPECT_TRUE(hasRule(d, "physics.suspicious-jump"));
    EXPECT_TRUE(hasRule(d, "decide.flagged"));
    EXPECT_FALSE(hasRule(d, "decide.suspicious-jump"));

    const Evaluation unflagged = evaluationWith({ timedShape(8192, 1, 5.0) });
    const Decision accepted
        = decide({ &unflagged, "weighted-geomean-speedup", ObjectiveValue { 2.0, 1.98, 2.02 }, "c0001" });
    EXPECT_EQ(accepted.verdict, Verdict::Accepted);
    EXPECT_TRUE(hasRule(accepted, "decide.faster"));
}

TEST(Decide, HarnessFailuresKeepTheirVerdict)
{
    for (Verdict v : { Verdict::CompileFailed, Verdict::Crashed, Verdict::TimedOut }) {
        const Evaluation e = evaluationWith({}, v);
        const Decision d = decide({ &e, "weighted-geomean-speedup", std::nullopt, "" });
        EXPECT_EQ(d.verdict, v);
        EXPECT_FALSE(d.reasons.empty());
    }
}

TEST(Decide, ApplyDecisionRecordsObjectiveAndReasons)
{
    const Evaluation e = evaluationWith({ timedShape(8192, 1, 1.5) });
    const Decision d = decide({ &e, "weighted-geomean-speedup", std::nullopt, "" });
    const Evaluation rec = applyDecision(e, d);
    EXPECT_EQ(rec.verdict, Verdict::Accepted);
    EXPECT_NEAR(rec.objective, 1.5, 1e-12);
    EXPECT_LT(rec.objectiveCiLow, 1.5);
    EXPECT_EQ(rec.reasons.size(), d.reasons.size());
}
