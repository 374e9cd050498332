// The worker's CPU planning of a pipeline (kernels/pipeline_plan.h) and the pipeline op's wire forms.
#include "core/catalogue.h"
#include "core/errors.h"
#include "kernels/pipeline_plan.h"
#include "kernels/worker_protocol.h"

#include <cmath>
#include <gtest/gtest.h>

namespace {
kl::Pipeline mlp()
{
    return kl::loadPipeline(kl::findPipelineFolder("llama_mlp_decode"));
}
} // namespace

TEST(PipelinePlan, OneBufferPerPipelineTensorSharedByItsReaders)
{
    const kl::Pipeline p = mlp();
    const kl::Shape s = p.space.tuningShapes[1]; // T = 16
    const kl::PipelineLayout l = kl::planPipeline(p, s);
    // 4 inputs, then each stage's outputs: norm.y, gate_up.C, act.y, down.C.
    ASSERT_EQ(l.buffers.size(), 8u);
    EXPECT_TRUE(l.buffers[0].pipelineInput);
    EXPECT_EQ(l.buffers[4].source.text(), "norm.y");
    EXPECT_TRUE(l.buffers[7].pipelineOutput);
    EXPECT_FALSE(l.buffers[5].pipelineOutput);
    // The gate/up GEMM reads the norm's output buffer and writes the one silu_and_mul reads.
    EXPECT_EQ(l.stages[1].buffers.at("A"), l.bufferOf({ "norm", "y" }));
    EXPECT_EQ(l.stages[2].buffers.at("x"), l.stages[1].buffers.at("C"));
    EXPECT_EQ(l.stages[1].shape.dims.at("N"), 16384);
    EXPECT_EQ(l.buffers[l.bufferOf({ "", "w_gate_up" })].bytes, 2ull * 16384 * 4096);
    std::uint64_t sum = 0;
    for (const auto& b : l.buffers)
        sum += b.bytes;
    EXPECT_EQ(l.bytesPerSet, sum);
    // An integer input keeps its describing stage's spec and shape (the harness fills it from them).
    EXPECT_EQ(l.buffers[l.bufferOf({ "", "x" })].spec->name, "x");
    EXPECT_EQ(l.buffers[l.bufferOf({ "", "x" })].describingShape.dims.at("H"), 4096);
}

TEST(PipelinePlan, RotationKeepsL2ColdWithinTheMemoryBudget)
{
    const std::int64_t l2 = 60ll << 20;
    // 8 MiB per set: ceil(120 / 8) + 1 = 16 sets.
    EXPECT_EQ(kl::pipelineRotationSets(8ull << 20, l2, 1ull << 40, 2), 16);
    // A set larger than 2x L2 still rotates over 2.
    EXPECT_EQ(kl::pipelineRotationSets(1ull << 30, l2, 1ull << 40, 2), 2);
    // Tiny sets are capped.
    EXPECT_EQ(kl::pipelineRotationSets(4096, l2, 1ull << 40, 2), 64);
    // Two variants of 16 x 8 MiB do not fit in 100 MiB: 6 sets do (96 MiB).
    EXPECT_EQ(kl::pipelineRotationSets(8ull << 20, l2, 100ull << 20, 2), 6);
    EXPECT_EQ(kl::pipelineRotationSets(8ull << 20, l2, 1, 2), 1);
}

TEST(PipelineTolerance, EightTimesTheHonestErrorNeverBelowTheProblemsOwn)
{
    const kl::Tolerance floor { 0.0039, 0.0156 }; // a bf16 output's measured single-problem tolerance
    // Nine bf16 stages compound: the honest chains' error is above the floor, the budget 8x the larger, per metric.
    kl::Tolerance t = kl::pipelineTolerance(floor, { { 0.0086, 0.030, true }, { 0.0085, 0.031, true } });
    EXPECT_DOUBLE_EQ(t.relL2, 8 * 0.0086);
    EXPECT_DOUBLE_EQ(t.maxAbs, 8 * 0.031);
    // A pipeline as precise as one stage keeps the stage's tolerance: the budget never drops below it.
    t = kl::pipelineTolerance(floor, { { 1e-5, 0.004, true }, { 2e-5, 0.001, true } });
    EXPECT_DOUBLE_EQ(t.relL2, 0.0039);
    EXPECT_DOUBLE_EQ(t.maxAbs, 8 * 0.004);
    // A measurement that failed (non-finite, unwritten) loosens nothing; with none, the floor stands.
    t = kl::pipelineTolerance(floor, { { 0.5, 0.9, false }, { 0.01, 0.02, true } });
    EXPECT_DOUBLE_EQ(t.relL2, 0.08);
    EXPECT_DOUBLE_EQ(t.maxAbs, 0.16);
    t = kl::pipelineTolerance(floor, { { 0.5, 0.9, false }, { INFINITY, NAN, false } });
    EXPECT_DOUBLE_EQ(t.relL2, floor.relL2);
    EXPECT_DOUBLE_EQ(t.maxAbs, floor.maxAbs);
    EXPECT_DOUBLE_EQ(kl::pipelineTolerance(floor, {}).relL2, floor.relL2);
    // Much worse than honest fails: a stage rounding to sign and exponent makes the output ~20% off.
    kl::PipelineOutputBudget b;
    b.tolerance = kl::pipelineTolerance(floor, { { 0.0086, 0.030, true } });
    b.pipeline = { 0.20, 0.75, true };
    EXPECT_FALSE(kl::withinBudget(b));
    b.pipeline = { 0.0090, 0.035, true }; // an honest candidate pipeline, a little off the references' chain
    EXPECT_TRUE(kl::withinBudget(b));
}

TEST(PipelineProtocol, RequestAndReplyRoundTrip)
{
    const kl::Pipeline p = mlp();
    kl::wire::PipelineRequest req;
    req.pipeline = kl::toJson(p);
    req.stages.resize(p.stages.size());
    req.stages[2].impl = "candidate";
    req.stages[2].label = "candidate c0007 of runs/silu";
    req.stages[2].candidate
        = kl::wire::CandidateWire { "k", "__global__ void f() {}", { { "BLOCK", 256 } }, {}, {}, {} };
    req.shapes = p.space.tuningShapes;
    req.seed = 7;
    const kl::Json j = kl::wire::toJson(req);
    EXPECT_EQ(j.at("op"), "pipeline");
    const auto back = kl::wire::parse<kl::wire::PipelineRequest>(j);
    EXPECT_EQ(back.pipeline, req.pipeline);
    ASSERT_EQ(back.stages.size(), 4u);
    EXPECT_EQ(back.stages[2].candidate->params.at("BLOCK"), 256);
    EXPECT_FALSE(back.stages[0].candidate);
    EXPECT_EQ(back.shapes, req.shapes);
    EXPECT_EQ(back.seed, 7u);

    kl::Json bad = j;
    bad["stages"][1]["impl"] = "fastest";
    try {
        kl::wire::parse<kl::wire::PipelineRequest>(bad);
        FAIL() << "accepted an unknown implementation";
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("pipeline.stages[1].impl"), std::string::npos) << e.what();
    }
    bad = j;
    bad["stages"][2].erase("candidate");
    EXPECT_THROW(kl::wire::parse<kl::wire::PipelineRequest>(bad), kl::InputError);

    kl::wire::PipelineReply reply;
    reply.ran = true;
    reply.result.pipeline = p.name;
    reply.result.accepted = true;
    reply.compiles.push_back({});
    const auto r = kl::wire::parse<kl::wire::PipelineReply>(kl::wire::toJson(reply));
    EXPECT_TRUE(r.ran);
    EXPECT_EQ(r.result.pipeline, "llama_mlp_decode");
    EXPECT_EQ(r.compiles.size(), 1u);
    EXPECT_FALSE(kl::wire::parse<kl::wire::PipelineReply>(kl::Json { { "compiles", kl::Json::array() } }).ran);
}
