// Pipelines as data (issue #19): pipeline.json loads against the problem catalogue, and bad wiring is refused with
// an error naming the file and the field.
#include "core/catalogue.h"
#include "core/errors.h"
#include "core/pipeline.h"
#include "core/pipeline_result.h"
#include "tests/support/temp_dir.h"

#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>

namespace {
// The MLP half of a decoder layer over the catalogue's own problems; each refusal below breaks one thing of it.
kl::Json mlpJson()
{
    return kl::Json::parse(R"JSON({
      "name": "mlp", "description": "rmsnorm -> gate/up -> silu_and_mul -> down",
      "dims": [{"name": "T", "min": 1, "max": 64}],
      "constants": {"H": 4096, "I": 8192},
      "inputs": ["x", "w_norm", "w_gate_up", "w_down"],
      "stages": [
        {"name": "norm", "problem": "rmsnorm", "dims": {"T": "T", "H": "H"}, "inputs": {"x": "x", "w": "w_norm"}},
        {"name": "gate_up", "problem": "gemm_bf16", "dims": {"M": "T", "N": "2 * I", "K": "H"},
         "inputs": {"A": "norm.y", "B": "w_gate_up"}, "impl": "library"},
        {"name": "act", "problem": "silu_and_mul", "dims": {"T": "T", "I": "I"}, "inputs": {"x": "gate_up.C"},
         "impl": {"session": "runs/silu", "candidate": "c0007"}},
        {"name": "down", "problem": "gemm_bf16", "dims": {"M": "T", "N": "H", "K": "I"},
         "inputs": {"A": "act.y", "B": "w_down"}}],
      "outputs": [{"name": "out", "from": "down.C"}],
      "tuning_shapes": [{"dims": {"T": 1}}, {"dims": {"T": 64}}],
      "verify_shapes": [{"dims": {"T": 3}}],
      "flops": "2 * T * 3 * I * H", "bytes": "2 * 3 * I * H"})JSON");
}

// The catalogue's problems, and rmsnorm_f32: rmsnorm writing f32, for a dtype mismatch.
kl::Problem lookup(const std::string& name)
{
    if (name != "rmsnorm_f32")
        return kl::catalogueProblem(name);
    kl::Problem p = kl::catalogueProblem("rmsnorm");
    for (auto& t : p.tensors)
        if (t.name == "y")
            t.dtype = kl::DType::F32;
    return p;
}

std::string refusal(const kl::Json& j)
{
    try {
        kl::pipelineFromJson(j, "mlp/pipeline.json", lookup);
    } catch (const kl::InputError& e) {
        return e.what();
    }
    return "accepted";
}

#define EXPECT_REFUSED(json, ...)                                                                                      \
    do {                                                                                                               \
        const std::string why = refusal(json);                                                                         \
        for (const char* part : { __VA_ARGS__ })                                                                       \
            EXPECT_NE(why.find(part), std::string::npos) << "missing '" << part << "' in: " << why;                    \
    } while (0)
} // namespace

TEST(Pipeline, LoadsWithStageShapesWiringAndImplementations)
{
    const kl::Pipeline p = kl::pipelineFromJson(mlpJson(), "mlp/pipeline.json", lookup);
    ASSERT_EQ(p.stages.size(), 4u);
    EXPECT_EQ(p.stages[1].problem.name, "gemm_bf16");
    EXPECT_EQ(p.stages[1].impl.kind, kl::StageImpl::Kind::Library);
    EXPECT_EQ(p.stages[0].impl.kind, kl::StageImpl::Kind::Baseline);
    EXPECT_EQ(p.stages[2].impl.describe(), "candidate c0007 of runs/silu");
    const kl::Shape s = p.space.tuningShapes[1];
    EXPECT_EQ(s.dims.at("T"), 64);
    EXPECT_EQ(s.dims.at("I"), 8192); // constants fill every shape
    const kl::Shape gateUp = p.stages[1].shapeAt(s);
    EXPECT_EQ(gateUp.dims.at("M"), 64);
    EXPECT_EQ(gateUp.dims.at("N"), 16384);
    EXPECT_EQ(gateUp.dims.at("K"), 4096);
    EXPECT_EQ(p.extentsAt(kl::TensorSource::parse("gate_up.C"), s), (std::vector<std::int64_t> { 64, 16384 }));
    // A pipeline input is described by the first stage that reads it.
    EXPECT_EQ(p.describingStage({ "", "w_gate_up" })->name, "gate_up");
    EXPECT_EQ(p.extentsAt({ "", "w_gate_up" }, s), (std::vector<std::int64_t> { 16384, 4096 }));
    EXPECT_EQ(p.sourceSpec({ "", "x" })->dtype, kl::DType::BF16);
    EXPECT_EQ(p.outputs[0].source.text(), "down.C");
    EXPECT_DOUBLE_EQ(p.space.flops.evaluate(s.bindings()), 2.0 * 64 * 3 * 8192 * 4096);
}

TEST(Pipeline, RoundTripsThroughJson)
{
    const kl::Pipeline p = kl::pipelineFromJson(mlpJson(), "mlp/pipeline.json", lookup);
    const kl::Pipeline q = kl::pipelineFromJson(kl::toJson(p), "again", lookup);
    EXPECT_EQ(kl::toJson(q), kl::toJson(p));
    EXPECT_EQ(q.stages[2].impl.candidate, "c0007");
    EXPECT_EQ(q.space.verifyShapes, p.space.verifyShapes);
}

TEST(Pipeline, RefusesUnknownProblem)
{
    kl::Json j = mlpJson();
    j["stages"][1]["problem"] = "gemm_fp4";
    EXPECT_REFUSED(j, "mlp/pipeline.json.stages[1].problem", "unknown problem 'gemm_fp4'");
}

TEST(Pipeline, RefusesUnknownTensors)
{
    kl::Json j = mlpJson();
    j["stages"][1]["inputs"]["A"] = "norm.z";
    EXPECT_REFUSED(j, "stages[1].inputs.A", "no output 'z'");
    j = mlpJson();
    j["stages"][1]["inputs"]["Q"] = "norm.y";
    EXPECT_REFUSED(j, "stages[1].inputs.Q", "has no tensor 'Q'");
    j = mlpJson();
    j["stages"][0]["inputs"]["x"] = "hidden";
    EXPECT_REFUSED(j, "stages[0].inputs.x", "'hidden' is not a pipeline input");
    j = mlpJson();
    j["stages"][1]["inputs"]["A"] = "nowhere.y";
    EXPECT_REFUSED(j, "stages[1].inputs.A", "names no stage 'nowhere'");
    j = mlpJson();
    j["stages"][1]["inputs"]["C"] = "norm.y"; // an output of the stage's own problem
    EXPECT_REFUSED(j, "stages[1].inputs.C", "is an output of problem gemm_bf16");
}

TEST(Pipeline, RefusesDtypeMismatch)
{
    kl::Json j = mlpJson();
    j["stages"][0]["problem"] = "rmsnorm_f32";
    EXPECT_REFUSED(j, "stages[1].inputs.A", "'norm.y' is f32", "input A is bf16");
}

TEST(Pipeline, RefusesShapeMismatchAtTheFirstShapeWhereItFails)
{
    kl::Json j = mlpJson();
    j["stages"][1]["dims"]["N"] = "I"; // gate/up writes [T, I]; silu_and_mul reads [T, 2 I]
    EXPECT_REFUSED(j, "stages[2].inputs.x at tuning_shapes[0] (H=4096,I=8192,T=1)", "'gate_up.C' is [1, 8192]",
        "input x is [1, 16384]");
    // A mismatch only at a verify shape is found there: silu_and_mul's T from a formula that agrees at T = 1, 64.
    j = mlpJson();
    j["stages"][2]["dims"]["T"] = "T == 3 ? 2 : T";
    EXPECT_REFUSED(j, "stages[2].inputs.x at verify_shapes[0] (H=4096,I=8192,T=3)", "is [3, 16384]");
}

TEST(Pipeline, AReshapedInputNeedsOnlyTheSameElementCount)
{
    // gate_up.C [T, 2 I] read by the down GEMM as A [T, I] is refused, also as a reshape (half the elements) ...
    kl::Json j = mlpJson();
    j["stages"][3]["inputs"]["A"] = "gate_up.C";
    EXPECT_REFUSED(j, "stages[3].inputs.A", "is [1, 16384] but problem gemm_bf16's input A is [1, 8192]");
    j["stages"][3]["inputs"]["A"] = { { "from", "gate_up.C" }, { "reshape", true } };
    EXPECT_REFUSED(j, "stages[3].inputs.A", "reshaped: the element counts differ");
    // ... while silu_and_mul's [T, I] output read as the down GEMM's [T * I / 4096, 4096] rows passes as a reshape.
    j = mlpJson();
    j["stages"][3]["dims"] = { { "M", "T * I / 4096" }, { "N", "H" }, { "K", "4096" } };
    j["stages"][3]["inputs"]["A"] = { { "from", "act.y" }, { "reshape", true } };
    const kl::Pipeline p = kl::pipelineFromJson(j, "mlp/pipeline.json", lookup);
    EXPECT_TRUE(p.stages[3].reshaped.count("A"));
    EXPECT_EQ(kl::pipelineFromJson(kl::toJson(p), "again", lookup).stages[3].reshaped, p.stages[3].reshaped);
    j["stages"][3]["inputs"]["A"] = "act.y";
    EXPECT_REFUSED(j, "stages[3].inputs.A", "'act.y' is [1, 8192] but problem gemm_bf16's input A is [2, 4096]");
}

TEST(Pipeline, RefusesInputFromALaterStageOrItselfAsACycle)
{
    kl::Json j = mlpJson();
    j["stages"][1]["inputs"]["A"] = "down.C";
    EXPECT_REFUSED(j, "stages[1].inputs.A", "comes from stage 3 (down)", "cycle");
    j = mlpJson();
    j["stages"][1]["inputs"]["A"] = "gate_up.C";
    EXPECT_REFUSED(j, "stages[1].inputs.A", "comes from stage 1 (gate_up)", "cycle");
}

TEST(Pipeline, RefusesOutputNeverProduced)
{
    kl::Json j = mlpJson();
    j["outputs"][0]["from"] = "down.D";
    EXPECT_REFUSED(j, "outputs[0].from", "produces no 'D'");
    j["outputs"][0]["from"] = "x";
    EXPECT_REFUSED(j, "outputs[0].from", "'x' is produced by no stage");
    j["outputs"] = kl::Json::array();
    EXPECT_REFUSED(j, "outputs: at least one output");
}

TEST(Pipeline, RefusesUnwiredStageInputAndUnreadPipelineInput)
{
    kl::Json j = mlpJson();
    j["stages"][3]["inputs"].erase("B");
    EXPECT_REFUSED(j, "stages[3].inputs: input 'B' of problem gemm_bf16 is not wired");
    j = mlpJson();
    j["inputs"].push_back("spare");
    EXPECT_REFUSED(j, "inputs[4]: input 'spare' is read by no stage");
}

TEST(Pipeline, RefusesDimMappingOutsideTheStageProblemsValidityRange)
{
    kl::Json j = mlpJson();
    j["constants"]["I"] = 14336; // Llama-3-8B: the gate/up GEMM's N = 28672 is past gemm_bf16's N <= 16384
    EXPECT_REFUSED(j, "stages[1].dims at tuning_shapes[0]", "outside the validity range of problem gemm_bf16",
        "N=28672 is outside [256, 16384]");
    j = mlpJson();
    j["dims"][0]["max"] = 16384; // the pipeline's own range is not checked against the stages', its shapes are
    j["verify_shapes"] = kl::Json::parse(R"([{"dims": {"T": 9000}}])");
    EXPECT_REFUSED(j, "stages[1].dims at verify_shapes[0] (H=4096,I=8192,T=9000)", "M=9000 is outside [1, 8192]");
}

TEST(Pipeline, RefusesUnmappedOrUnknownDims)
{
    kl::Json j = mlpJson();
    j["stages"][1]["dims"].erase("K");
    EXPECT_REFUSED(j, "stages[1].dims: dim K of problem gemm_bf16 is not mapped");
    j = mlpJson();
    j["stages"][1]["dims"]["Z"] = "T";
    EXPECT_REFUSED(j, "stages[1].dims.Z: not a dim of problem gemm_bf16");
    j = mlpJson();
    j["stages"][1]["dims"]["M"] = "B";
    EXPECT_REFUSED(j, "stages[1].dims.M", "names 'B', which is not a dim of the pipeline");
}

TEST(Pipeline, RefusesBadStagesAndImplementations)
{
    kl::Json j = mlpJson();
    j["stages"][2]["name"] = "norm";
    EXPECT_REFUSED(j, "stages[2].name: a stage named 'norm' comes earlier");
    j = mlpJson();
    j["stages"][0]["impl"] = "library";
    EXPECT_REFUSED(j, "stages[0].impl: problem rmsnorm has no library fallback");
    j["stages"][0]["impl"] = "fastest";
    EXPECT_REFUSED(j, "stages[0].impl: 'fastest' is not an implementation");
    j["stages"][0]["impl"] = { { "session", "runs/x" }, { "candidate", "../../etc" } };
    EXPECT_REFUSED(j, "stages[0].impl.candidate", "is not a candidate id");
    j = mlpJson();
    j["flops"] = "2 * T * Q";
    EXPECT_REFUSED(j, "mlp/pipeline.json.flops", "not a dim");
    j = mlpJson();
    j["stages"] = kl::Json::array();
    EXPECT_REFUSED(j, "stages: at least one stage");
}

TEST(Pipeline, ShippedPipelinesLoadFromTheCatalogue)
{
    std::vector<std::string> errors;
    const std::vector<kl::Pipeline> all = kl::loadPipelines(&errors);
    EXPECT_TRUE(errors.empty()) << errors.front();
    const auto names = kl::listPipelines();
    EXPECT_EQ(all.size(), names.size());
    ASSERT_NE(std::find(names.begin(), names.end(), "llama_mlp_decode"), names.end());
    const kl::Pipeline p = kl::loadPipeline(kl::findPipelineFolder("llama_mlp_decode"));
    EXPECT_EQ(p.stages.size(), 4u);
    EXPECT_GT(p.peaks.flopsPerSecond, 0);
    for (const auto& pipeline : all)
        EXPECT_FALSE(pipeline.peaks.source.empty()) << pipeline.name << ": MFU/MBU need measured peaks";
    // The decoder layer (round5-interfaces.md): nine stages, attention's output read as the O-projection's rows.
    const kl::Pipeline layer = kl::loadPipeline(kl::findPipelineFolder("llama_decoder_decode"));
    ASSERT_EQ(layer.stages.size(), 9u);
    EXPECT_EQ(layer.stages[4].inputs.at("A").text(), "attn.out");
    EXPECT_TRUE(layer.stages[4].reshaped.count("A"));
    EXPECT_EQ(layer.stages[5].inputs.at("residual").text(), "norm1.residual_out");
    // DSA decode: the indexer's scores into top-k, its indices into sparse MLA; block_table and seq_lens shared.
    const kl::Pipeline dsa = kl::loadPipeline(kl::findPipelineFolder("dsa_decode"));
    ASSERT_EQ(dsa.stages.size(), 3u);
    EXPECT_EQ(dsa.stages[2].inputs.at("indices").text(), "topk.indices");
    EXPECT_EQ(dsa.stages[0].inputs.at("block_table"), dsa.stages[2].inputs.at("block_table"));
    EXPECT_EQ(dsa.stages[0].inputs.at("seq_lens"), dsa.stages[1].inputs.at("seq_lens"));
    const kl::Shape big = dsa.space.tuningShapes[1]; // B = 128, SQ = 1, MAXP = 128
    EXPECT_EQ(dsa.extentsAt({ "topk", "indices" }, big), (std::vector<std::int64_t> { 128, 1, 2048 }));
}

TEST(Pipeline, CatalogueReportsABadFileByName)
{
    kl::test::TempDir dir;
    std::filesystem::create_directories(dir.path() / "broken");
    kl::Json j = mlpJson();
    j["stages"][3]["inputs"]["A"] = "gate_up.C";
    std::ofstream(dir.path() / "broken" / "pipeline.json") << j.dump();
    ::setenv("KL_PIPELINES_DIR", dir.path().c_str(), 1);
    std::vector<std::string> errors;
    kl::loadPipelines(&errors);
    EXPECT_EQ(kl::findPipelineFolder("broken"), dir.path() / "broken");
    ::unsetenv("KL_PIPELINES_DIR");
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors[0].find("broken/pipeline.json.stages[3].inputs.A"), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find("is [1, 16384] but problem gemm_bf16's input A is [1, 8192]"), std::string::npos)
        << errors[0];
}

namespace {
kl::TimingStats timing(double medianUs, double halfWidth = 0.01)
{
    kl::TimingStats t;
    t.medianUs = medianUs;
    t.ciLowUs = medianUs * (1 - halfWidth);
    t.ciHighUs = medianUs * (1 + halfWidth);
    t.samples = 40;
    return t;
}

kl::CorrectnessStats passed(const char* distribution, bool ok = true)
{
    kl::CorrectnessStats c;
    c.distribution = distribution;
    c.passed = ok;
    return c;
}

// Two stages measured at one shape: norm (baseline) and act (a candidate), everything correct and captured.
kl::PipelineResult measured()
{
    kl::PipelineResult r;
    r.pipeline = "mlp";
    r.peaks = { 1e15, 4e12, "test peaks" };
    kl::PipelineShapeResult s;
    s.shape.dims = { { "T", 16 } };
    for (const char* name : { "norm", "act" }) {
        kl::PipelineStageResult st;
        st.stage = name;
        st.problem = name == std::string("norm") ? "rmsnorm" : "silu_and_mul";
        st.impl = name == std::string("norm") ? "baseline" : "candidate c0007 of runs/silu";
        st.differsFromBaseline = name != std::string("norm");
        st.shape.dims = { { "T", 16 }, { "H", 4096 } };
        st.graph = timing(name == std::string("norm") ? 3.0 : 1.0);
        st.eager = timing(name == std::string("norm") ? 8.0 : 6.0);
        st.baselineGraph = timing(name == std::string("norm") ? 3.0 : 2.0);
        st.baselineEager = timing(name == std::string("norm") ? 8.0 : 7.0);
        st.check = passed("stage:normal");
        s.stages.push_back(st);
    }
    s.graph = timing(4.0);
    s.eager = timing(14.0);
    s.baselineGraph = timing(5.0);
    s.baselineEager = timing(15.0);
    s.speedup = 1.25;
    s.speedupCiLow = 1.2;
    s.speedupCiHigh = 1.3;
    s.eagerSpeedup = 15.0 / 14.0;
    s.checks = { passed("end-to-end:normal"), passed("end-to-end:graph") };
    kl::PipelineOutputBudget budget;
    budget.output = "y";
    budget.floor = { 0.0039, 0.0156 };
    budget.fp32Chain = { 0.0086, 0.03, true };
    budget.allBaseline = { 0.0085, 0.031, true };
    budget.tolerance = { 0.0688, 0.248 };
    budget.pipeline = { 0.009, 0.03, true };
    s.budgets = { budget };
    s.correct = true;
    s.flops = 8e6;
    s.bytes = 8e6;
    r.shapes.push_back(s);
    return r;
}

bool hasReason(const kl::PipelineResult& r, const std::string& rule, const std::string& part)
{
    for (const auto& x : r.reasons)
        if (x.rule == rule && x.message.find(part) != std::string::npos)
            return true;
    return false;
}
} // namespace

TEST(PipelineResult, SharesAndUtilisationFromTheGraphTimes)
{
    kl::PipelineResult r = measured();
    kl::judgePipeline(r);
    EXPECT_TRUE(r.accepted);
    EXPECT_TRUE(r.reasons.empty());
    const auto& s = r.shapes[0];
    EXPECT_DOUBLE_EQ(s.stages[0].share, 0.75);
    EXPECT_DOUBLE_EQ(s.stages[1].share, 0.25);
    EXPECT_DOUBLE_EQ(s.mfu, 8e6 / 4e-6 / 1e15);
    EXPECT_DOUBLE_EQ(s.mbu, 8e6 / 4e-6 / 4e12);
}

TEST(PipelineResult, AStageThatBreaksCaptureIsRejectedByName)
{
    kl::PipelineResult r = measured();
    r.shapes[0].stages[1].captured = false;
    r.shapes[0].stages[1].graph.reset();
    r.shapes[0].stages[1].captureError = "operation not permitted when stream is capturing";
    r.shapes[0].graph.reset();
    kl::judgePipeline(r);
    EXPECT_FALSE(r.accepted);
    ASSERT_EQ(r.reasons.size(), 1u);
    EXPECT_TRUE(
        hasReason(r, "pipeline.graph-capture-failed", "stage act (silu_and_mul, candidate c0007 of runs/silu)"));
    EXPECT_TRUE(hasReason(r, "pipeline.graph-capture-failed", "not permitted when stream is capturing"));
    // Without a graph of the whole pipeline and no stage to blame, the pipeline itself is named.
    r = measured();
    r.shapes[0].graph.reset();
    kl::judgePipeline(r);
    EXPECT_TRUE(hasReason(r, "pipeline.graph-capture-failed", "the pipeline cannot be captured"));
}

TEST(PipelineResult, AStageThatWinsOnlyEagerIsRejectedByName)
{
    kl::PipelineResult r = measured();
    r.shapes[0].stages[1].eager = timing(4.0); // beats its baseline's 7 us eager ...
    r.shapes[0].stages[1].graph = timing(2.5); // ... but not its 2 us under the graph
    kl::judgePipeline(r);
    EXPECT_FALSE(r.accepted);
    EXPECT_TRUE(hasReason(r, "pipeline.eager-only-win", "stage act"));
    EXPECT_TRUE(hasReason(r, "pipeline.eager-only-win", "eager 4.00 us vs 7.00 us, graph 2.50 us vs 2.00 us"));
    // The baseline stage's own timings are never a win to judge.
    r = measured();
    r.shapes[0].stages[0].eager = timing(4.0);
    kl::judgePipeline(r);
    EXPECT_TRUE(r.accepted);
    // The pipeline as a whole: faster eager, slower under the graph.
    r = measured();
    r.shapes[0].eagerSpeedup = 1.2;
    r.shapes[0].speedup = 0.9;
    r.shapes[0].speedupCiLow = 0.88;
    r.shapes[0].speedupCiHigh = 0.92;
    kl::judgePipeline(r);
    EXPECT_TRUE(hasReason(r, "pipeline.eager-only-win", "only with graphs off at T=16"));
}

TEST(PipelineResult, WrongStagesAndOutputsAreRejected)
{
    kl::PipelineResult r = measured();
    r.shapes[0].stages[0].check = passed("stage:normal", false);
    r.shapes[0].checks[1].passed = false;
    r.shapes[0].checks[1].relL2 = 0.031;
    r.shapes[0].checks[1].maxAbs = 0.5;
    r.shapes[0].correct = false;
    kl::judgePipeline(r);
    EXPECT_FALSE(r.accepted);
    EXPECT_TRUE(hasReason(r, "pipeline.stage-wrong", "stage norm (rmsnorm, baseline)"));
    EXPECT_TRUE(hasReason(r, "pipeline.end-to-end-wrong", "check end-to-end:graph: rel_l2 0.031, max_abs 0.5"));
}

TEST(PipelineResult, AnEndToEndFailureNamesTheOutputOverItsBudgetWithTheHonestError)
{
    kl::PipelineResult r = measured();
    kl::PipelineOutputBudget& b = r.shapes[0].budgets[0];
    EXPECT_TRUE(kl::withinBudget(b));
    EXPECT_EQ(kl::describeBudget(b),
        "y: rel_l2 / max_abs 0.009 / 0.03 within 0.0688 / 0.248 (honest: fp32 chain 0.0086 / 0.03, all-baseline "
        "0.0085 / 0.031; floor 0.0039 / 0.0156)");
    // One metric over is over; so is an error that could not be measured (non-finite, not fully written).
    b.pipeline = { 0.05, 0.3, true };
    EXPECT_FALSE(kl::withinBudget(b));
    b.pipeline = { 0.001, 0.001, false };
    EXPECT_FALSE(kl::withinBudget(b));
    EXPECT_NE(kl::describeBudget(b).find("not measured over 0.0688 / 0.248"), std::string::npos);
    b.pipeline = { 0.2, 0.75, true };
    r.shapes[0].checks[0].passed = false;
    r.shapes[0].checks[0].relL2 = 0.2;
    r.shapes[0].checks[0].maxAbs = 0.75;
    r.shapes[0].correct = false;
    kl::judgePipeline(r);
    EXPECT_FALSE(r.accepted);
    EXPECT_TRUE(hasReason(r, "pipeline.end-to-end-wrong",
        "rel_l2 0.2, max_abs 0.75; y: rel_l2 / max_abs 0.2 / 0.75 over 0.0688 / 0.248 (honest: fp32 chain"))
        << r.reasons.front().message;
}

TEST(PipelineResult, AFailedTimedRecheckRejectsUnderTheWorkersRuleAlone)
{
    kl::PipelineResult r = measured();
    r.shapes[0].checks.push_back(passed("timed:7", false));
    r.shapes[0].correct = false;
    r.reasons.push_back(
        { "dynamic.timed-output-wrong", "outputs the pipeline wrote during the timed runs are wrong", 0, true });
    kl::judgePipeline(r);
    EXPECT_FALSE(r.accepted);
    EXPECT_FALSE(hasReason(r, "pipeline.end-to-end-wrong", ""));
    EXPECT_TRUE(hasReason(r, "dynamic.timed-output-wrong", "timed runs"));
    // Nothing blocking recorded, but a shape not correct: still rejected.
    r = measured();
    r.shapes[0].checks.push_back(passed("timed:3", false));
    r.shapes[0].correct = false;
    kl::judgePipeline(r);
    EXPECT_FALSE(r.accepted);
}

TEST(PipelineResult, RoundTripsAndRefusesBadFieldsByName)
{
    kl::PipelineResult r = measured();
    kl::judgePipeline(r);
    const kl::Json j = kl::toJson(r);
    const kl::PipelineResult back = kl::pipelineResultFromJson(j, "result.json");
    EXPECT_EQ(kl::toJson(back), j);
    kl::Json bad = j;
    bad["shapes"][0]["stages"][1]["graph"]["median_us"] = "fast";
    try {
        kl::pipelineResultFromJson(bad, "result.json");
        FAIL() << "accepted a string median";
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("result.json.shapes[0].stages[1].graph.median_us"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(back.shapes[0].budgets.size(), 1u);
    bad = j;
    bad["shapes"][0]["budgets"][0]["tolerance"].erase("rel_l2");
    try {
        kl::pipelineResultFromJson(bad, "result.json");
        FAIL() << "accepted a budget without its tolerance";
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("result.json.shapes[0].budgets[0].tolerance"), std::string::npos)
            << e.what();
    }
    // A result written before budgets existed still loads.
    bad = j;
    bad["shapes"][0].erase("budgets");
    EXPECT_TRUE(kl::pipelineResultFromJson(bad, "result.json").shapes[0].budgets.empty());
}

// A stage that updates a tensor in place would change what the tensor's other readers see: refused, naming the stage.
TEST(Pipeline, RefusesAnInPlaceStage)
{
    kl::Json j = mlpJson();
    j["inputs"] = { "x", "res", "w_norm", "w_gate_up", "w_down" };
    j["stages"][0]
        = { { "name", "norm" }, { "problem", "fused_add_rmsnorm" }, { "dims", { { "T", "T" }, { "H", "H" } } },
              { "inputs", { { "x", "x" }, { "residual", "res" }, { "w", "w_norm" } } } };
    j["stages"][1]["inputs"]["A"] = "x";
    EXPECT_REFUSED(j, "mlp/pipeline.json.stages[0].problem", "fused_add_rmsnorm updates tensor 'x' in place",
        "pipeline stages cannot be in-place");
}
