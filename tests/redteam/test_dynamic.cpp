// The mapping from the harness's GPU observations to rule ids.
#include "kernels/referee/referee.h"

#include <algorithm>
#include <gtest/gtest.h>

namespace {

using kl::referee::checkDynamic;
using kl::referee::DynamicObservations;

kl::CorrectnessStats check(const std::string& distribution, bool passed)
{
    kl::CorrectnessStats c;
    c.distribution = distribution;
    c.passed = passed;
    c.relL2 = passed ? 1e-3 : 0.3;
    return c;
}

kl::ShapeResult shape(std::int64_t T, bool heldOut, std::vector<kl::CorrectnessStats> checks)
{
    kl::ShapeResult s;
    s.shape.dims = { { "T", T }, { "H", 4096 } };
    s.heldOut = heldOut;
    s.checks = std::move(checks);
    s.correct = std::all_of(s.checks.begin(), s.checks.end(), [](const auto& c) { return c.passed; });
    return s;
}

std::vector<std::string> rules(const std::vector<kl::VerdictReason>& rs)
{
    std::vector<std::string> out;
    for (const auto& r : rs)
        out.push_back(r.rule);
    return out;
}

TEST(Dynamic, IntegrityFactsNameTheirRules)
{
    auto c = check("normal", false);
    c.canariesIntact = false;
    c.inputsUnchanged = false;
    c.fullCoverage = false;
    c.nonFinite = true;
    kl::Evaluation e;
    e.shapes = { shape(64, false, { c }) };
    EXPECT_EQ(rules(checkDynamic(e, {}, {})),
        (std::vector<std::string> {
            "dynamic.canary", "dynamic.input-modified", "dynamic.coverage", "correctness.non-finite" }));
    for (const auto& r : checkDynamic(e, {}, {}))
        EXPECT_TRUE(r.blocking);
}

TEST(Dynamic, PlainErrorIsRelL2AndPassingIsClean)
{
    kl::Evaluation e;
    e.shapes = { shape(64, false, { check("normal", true), check("large", false) }) };
    EXPECT_EQ(rules(checkDynamic(e, {}, {})), std::vector<std::string> { "correctness.rel-l2" });
    e.shapes = { shape(64, false, { check("normal", true), check("large", true) }) };
    EXPECT_TRUE(checkDynamic(e, {}, {}).empty());
}

TEST(Dynamic, RunOrderExposesState)
{
    kl::Evaluation e;
    e.shapes = { shape(64, false, { check("order:A", true), check("order:B", true), check("order:A'", false) }) };
    EXPECT_EQ(rules(checkDynamic(e, {}, {})), std::vector<std::string> { "dynamic.state-between-launches" });
    e.shapes = { shape(64, false, { check("order:A", true), check("order:B", false), check("order:A'", true) }) };
    EXPECT_EQ(rules(checkDynamic(e, {}, {})), std::vector<std::string> { "dynamic.state-between-launches" });
    // A wrong A is a plain error, not state.
    e.shapes = { shape(64, false, { check("order:A", false), check("order:B", false), check("order:A'", false) }) };
    EXPECT_EQ(rules(checkDynamic(e, {}, {})),
        (std::vector<std::string> { "correctness.rel-l2", "correctness.rel-l2", "correctness.rel-l2" }));
}

TEST(Dynamic, TimedOutputsWrongWhileChecksPassed)
{
    kl::Evaluation e;
    e.shapes = { shape(64, false, { check("normal", true), check("timed:7", false) }) };
    EXPECT_EQ(rules(checkDynamic(e, {}, {})), std::vector<std::string> { "dynamic.timed-output-wrong" });
}

TEST(Dynamic, HeldOutShapeOnlyWhenEveryShownShapePasses)
{
    kl::Evaluation e;
    e.shapes = { shape(64, false, { check("normal", true) }), shape(3001, true, { check("normal", false) }) };
    const auto rs = checkDynamic(e, {}, {});
    ASSERT_EQ(rules(rs), std::vector<std::string> { "dynamic.held-out-shape" });
    // The reason reaches agents' prompts, so it must not name the held-out shape.
    EXPECT_EQ(rs[0].message.find("3001"), std::string::npos) << rs[0].message;
    EXPECT_NE(rs[0].message.find("held-out shape"), std::string::npos) << rs[0].message;
    e.shapes[0] = shape(64, false, { check("normal", false) });
    EXPECT_EQ(
        rules(checkDynamic(e, {}, {})), (std::vector<std::string> { "correctness.rel-l2", "correctness.rel-l2" }));
}

TEST(Dynamic, KernelRecordsMustMatchThePlan)
{
    DynamicObservations obs;
    obs.plannedKernels = { "rmsnorm_kernel" };
    obs.observedKernels = { "_Z14rmsnorm_kernelP13__nv_bfloat16PKS_S2_iif" };
    obs.observedKernelsValid = true;
    EXPECT_TRUE(checkDynamic({}, {}, obs).empty());
    obs.observedKernels
        = { "rmsnorm_kernel(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int, int, float)",
              "rmsnorm_rows(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int, float)" };
    auto rs = checkDynamic({}, {}, obs);
    ASSERT_EQ(rules(rs), std::vector<std::string> { "dynamic.kernel-mismatch" });
    EXPECT_NE(rs[0].message.find("rmsnorm_rows"), std::string::npos);
    obs.observedKernels = {};
    rs = checkDynamic({}, {}, obs);
    ASSERT_EQ(rules(rs), std::vector<std::string> { "dynamic.kernel-mismatch" });
    EXPECT_NE(rs[0].message.find("planned but not run: rmsnorm_kernel"), std::string::npos);
    obs.observedKernelsValid = false; // without CUPTI there is nothing to compare
    EXPECT_TRUE(checkDynamic({}, {}, obs).empty());
}

TEST(Dynamic, KernelNameMatching)
{
    using kl::referee::kernelNameMatches;
    EXPECT_TRUE(kernelNameMatches("softmax_kernel", "softmax_kernel"));
    EXPECT_TRUE(kernelNameMatches("softmax_kernel", "void softmax_kernel<256>(__half*, const __half*, int, int)"));
    EXPECT_TRUE(kernelNameMatches("softmax_kernel", "_Z14softmax_kernelP6__halfPKS_ii"));
    EXPECT_FALSE(kernelNameMatches("softmax_kernel", "softmax_kernel2(float*)"));
    EXPECT_FALSE(kernelNameMatches("softmax_kernel", "_Z15softmax_kernel2Pf"));
    EXPECT_FALSE(kernelNameMatches("softmax_kernel", "my_softmax_kernel(float*)"));
}

TEST(Dynamic, GraphCapture)
{
    DynamicObservations obs;
    obs.graphAttempted = true;
    obs.graphCaptured = false;
    obs.graphError = "operation not permitted when stream is capturing";
    auto rs = checkDynamic({}, {}, obs);
    ASSERT_EQ(rules(rs), std::vector<std::string> { "graph.capture-failed" });
    EXPECT_NE(rs[0].message.find("not permitted"), std::string::npos);
    obs.graphCaptured = true;
    obs.graphReplayCorrect = false;
    EXPECT_EQ(rules(checkDynamic({}, {}, obs)), std::vector<std::string> { "graph.capture-failed" });
    obs.graphReplayCorrect = true;
    EXPECT_TRUE(checkDynamic({}, {}, obs).empty());
}

} // namespace
