// Pipelines on a real GPU (issue #19): a two-stage pipeline of existing problems (rmsnorm -> silu_and_mul) verifies
// end to end and per stage and is timed as one CUDA graph against the all-baseline pipeline, through the worker's
// pipeline op; the shipped llama_mlp_decode runs too (cuBLAS stages); and a stage that breaks graph capture is
// rejected by name. No statically clean candidate can break capture (kernels/REFEREE.md), so that stage is a plan
// that synchronizes its stream after its launches, as host code of a library stage could, run by the engine in
// process (pipeline_capture_probe.cpp).
#include "core/catalogue.h"
#include "core/session_store.h"
#include "kernels/pipeline_runner.h"
#include "tests/support/gpu_available.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <gtest/gtest.h>

namespace {

// The two-stage pipeline the tests and the capture probe share: rmsnorm then SiLU-and-mul over its output.
kl::Pipeline normAct()
{
    return kl::loadPipeline(KL_SOURCE_DIR "/tests/kernels/pipelines/norm_act");
}

kl::PipelineRunOptions quick()
{
    kl::PipelineRunOptions o;
    o.maxSecondsPerShape = 1.0;
    if (const char* w = std::getenv("KL_WORKER"))
        o.worker.command = { w };
    return o;
}

std::string reasonsText(const kl::PipelineResult& r)
{
    std::string s = r.accepted ? "accepted" : "rejected";
    for (const auto& x : r.reasons)
        s += "\n  " + x.rule + ": " + x.message;
    return s;
}

bool hasReason(const kl::PipelineResult& r, const std::string& rule, const std::string& part)
{
    return std::any_of(r.reasons.begin(), r.reasons.end(),
        [&](const auto& x) { return x.rule == rule && x.message.find(part) != std::string::npos; });
}

} // namespace

TEST(PipelineGpu, TwoStagesVerifyAndTimeAsOneGraphAgainstTheAllBaselinePipeline)
{
    REQUIRE_GPU();
    kl::Pipeline p = normAct();
    p.stages[1].impl.kind = kl::StageImpl::Kind::Reference; // a stage that differs from the baseline
    kl::PipelineRunOptions o = quick();
    kl::WorkerClient client(o.worker);
    const kl::PipelineResult r = kl::runPipelineOnWorker(p, o, client);
    ASSERT_EQ(r.shapes.size(), 2u) << reasonsText(r);
    EXPECT_TRUE(r.accepted) << reasonsText(r);
    for (const auto& s : r.shapes) {
        EXPECT_TRUE(s.correct) << s.shape.label();
        ASSERT_EQ(s.checks.size(), 2u); // eager and replayed from the graph
        ASSERT_TRUE(s.graph && s.baselineGraph && s.eager && s.baselineEager) << s.shape.label();
        EXPECT_GT(s.graph->medianUs, 0);
        EXPECT_GE(s.inputSets, 2);
        EXPECT_GT(s.speedup, 0);
        EXPECT_LE(s.speedupCiLow, s.speedup);
        EXPECT_GE(s.speedupCiHigh, s.speedup);
        EXPECT_GT(s.mbu, 0);
        EXPECT_LT(s.mbu, 1.5) << "bytes moved faster than the copy bandwidth allows";
        double shares = 0;
        for (const auto& st : s.stages) {
            EXPECT_TRUE(st.captured) << st.stage << ": " << st.captureError;
            ASSERT_TRUE(st.check) << st.stage;
            EXPECT_TRUE(st.check->passed) << st.stage << " at " << s.shape.label();
            ASSERT_TRUE(st.graph && st.baselineGraph) << st.stage;
            shares += st.share;
        }
        EXPECT_NEAR(shares, 1.0, 1e-9);
        // One graph of both stages costs no more than the two stages' graphs apart plus launch noise.
        EXPECT_LT(s.graph->medianUs, 1.5 * (s.stages[0].graph->medianUs + s.stages[1].graph->medianUs) + 5.0);
    }
    EXPECT_EQ(r.shapes[0].stages[1].impl, "reference");
}

TEST(PipelineGpu, TheShippedMlpPipelineRunsWithItsLibraryStages)
{
    REQUIRE_GPU();
    const kl::Pipeline p = kl::loadPipeline(kl::findPipelineFolder("llama_mlp_decode"));
    kl::PipelineRunOptions o = quick();
    o.shapes = { p.space.tuningShapes.back() }; // T = 64
    kl::WorkerClient client(o.worker);
    const kl::PipelineResult r = kl::runPipelineOnWorker(p, o, client);
    ASSERT_EQ(r.shapes.size(), 1u) << reasonsText(r);
    EXPECT_TRUE(r.shapes[0].correct) << reasonsText(r);
    ASSERT_TRUE(r.shapes[0].graph) << reasonsText(r);
    EXPECT_GT(r.shapes[0].mfu, 0);
    // The weight-streaming GEMMs dominate a decode step's MLP.
    EXPECT_GT(r.shapes[0].stages[1].share + r.shapes[0].stages[3].share, 0.5);
}

TEST(PipelineGpu, AStageThatBreaksGraphCaptureIsRejectedByName)
{
    REQUIRE_GPU();
    // The probe links the engine (and so the CUDA driver): it runs as its own process, this test only reads its
    // result, so that the suite loads on a machine without a driver.
    std::FILE* probe = ::popen(KL_PIPELINE_CAPTURE_PROBE, "r");
    ASSERT_NE(probe, nullptr);
    std::string out;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, probe)) > 0;)
        out.append(buf, n);
    ASSERT_EQ(::pclose(probe), 0) << out;
    const kl::PipelineResult r = kl::pipelineResultFromJson(kl::Json::parse(out), "probe");
    EXPECT_FALSE(r.accepted);
    EXPECT_TRUE(hasReason(r, "pipeline.graph-capture-failed", "stage act (silu_and_mul, synchronizing baseline)"))
        << reasonsText(r);
    ASSERT_EQ(r.shapes.size(), 1u);
    const kl::PipelineShapeResult& s = r.shapes[0];
    EXPECT_TRUE(s.stages[0].captured);
    EXPECT_FALSE(s.stages[1].captured);
    EXPECT_FALSE(s.stages[1].captureError.empty());
    EXPECT_FALSE(s.graph) << "a pipeline with a stage that cannot be captured has no graph time";
    // Eager it still runs and is right: the rejection is for the capture alone.
    ASSERT_TRUE(s.eager);
    EXPECT_TRUE(s.correct);
    ASSERT_TRUE(s.stages[1].check);
    EXPECT_TRUE(s.stages[1].check->passed);
}
