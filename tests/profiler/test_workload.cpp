#include "core/errors.h"
#include "core/json_io.h"
#include "profiler/importers.h"
#include "profiler/workload.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <numeric>

using namespace kl;
using namespace kl::prof;

namespace {

const std::string kSource = KL_SOURCE_DIR;
const std::string kLlamaTrace = kSource + "/resources/traces/h200-llama-decode.pt.trace.json.gz";

std::vector<Problem> catalogue()
{
    std::vector<Problem> out;
    for (const char* name : { "rmsnorm", "silu_and_mul", "gemm_bf16", "decode_attention", "softmax", "mla_decode",
             "add_rmsnorm", "rotary_embedding" })
        out.push_back(loadProblem(kSource + "/kernels/problems/" + name));
    return out;
}

const WorkloadShape* shapeOf(const TunableOp& op, const std::map<std::string, int64_t>& dims)
{
    for (const auto& s : op.shapes) {
        bool all = true;
        for (const auto& [k, v] : dims)
            all &= s.shape.dims.count(k) && s.shape.dims.at(k) == v;
        if (all)
            return &s;
    }
    return nullptr;
}

const Workload& llamaWorkload()
{
    static const Workload w = [] {
        const Trace t = importTraceFile(kLlamaTrace);
        WorkloadOptions all;
        all.topGroups = 1000;
        return analyzeWorkload(t, catalogue(), all);
    }();
    return w;
}

} // namespace

// The recorded H200 trace of a Hugging Face Llama (prefill 512 + 24 decode steps, 2 layers): the matching finds the
// model's RMSNorm modules, SiLU-and-mul, GEMMs and decode attention with the shapes and call counts the model ran.
TEST(Workload, RecordedLlamaTraceFindsTheModelsOperationsWithTheirShapes)
{
    const Workload& w = llamaWorkload();
    EXPECT_GT(w.opsWithShapes, 1000u);

    const TunableOp* norm = w.tunableFor("rmsnorm");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->rule, "module *RMSNorm");
    // 2 layers x 2 norms + the final norm per forward pass: 5 at T=512 (prefill), 5 x 24 at T=1 (decode).
    const WorkloadShape* decodeNorm = shapeOf(*norm, { { "T", 1 }, { "H", 4096 } });
    const WorkloadShape* prefillNorm = shapeOf(*norm, { { "T", 512 }, { "H", 4096 } });
    ASSERT_NE(decodeNorm, nullptr);
    ASSERT_NE(prefillNorm, nullptr);
    EXPECT_EQ(decodeNorm->calls, 120u);
    EXPECT_EQ(prefillNorm->calls, 5u);
    EXPECT_TRUE(decodeNorm->outside.empty());
    EXPECT_EQ(norm->shapes.size(), 2u);

    const TunableOp* act = w.tunableFor("silu_and_mul");
    ASSERT_NE(act, nullptr);
    const WorkloadShape* decodeAct = shapeOf(*act, { { "T", 1 }, { "I", 14336 } });
    ASSERT_NE(decodeAct, nullptr);
    EXPECT_EQ(decodeAct->calls, 48u);
    EXPECT_EQ(act->calls, 50u);
    // The aten::mul after the silu (the up projection's GEMM in between) belongs to the fused problem: two kernels
    // per call.
    const auto actGroup
        = std::find_if(w.groups.begin(), w.groups.end(), [](const OpGroup& g) { return g.problem == "silu_and_mul"; });
    ASSERT_NE(actGroup, w.groups.end());
    EXPECT_EQ(actGroup->kernels, 100u);
    EXPECT_EQ(actGroup->opClass, "activation");

    const TunableOp* gemm = w.tunableFor("gemm_bf16");
    ASSERT_NE(gemm, nullptr);
    // 7 projections per layer x 2 layers + the LM head, 25 forward passes.
    EXPECT_EQ(gemm->calls, 375u);
    // The down projection (K = 14336) is in gemm_bf16's range; the LM head (N = the vocabulary) is not, and the
    // reason names the dim.
    const WorkloadShape* down = shapeOf(*gemm, { { "M", 1 }, { "N", 4096 }, { "K", 14336 } });
    ASSERT_NE(down, nullptr);
    EXPECT_TRUE(down->outside.empty()) << down->outside;
    const auto lmHead = std::find_if(
        gemm->shapes.begin(), gemm->shapes.end(), [](const WorkloadShape& s) { return s.shape.dims.at("N") > 16384; });
    ASSERT_NE(lmHead, gemm->shapes.end());
    EXPECT_NE(lmHead->outside.find("N=" + std::to_string(lmHead->shape.dims.at("N"))), std::string::npos)
        << lmHead->outside;
    const WorkloadShape* qProj = shapeOf(*gemm, { { "M", 512 }, { "N", 4096 }, { "K", 4096 } });
    ASSERT_NE(qProj, nullptr);
    EXPECT_TRUE(qProj->outside.empty());
    EXPECT_DOUBLE_EQ(qProj->flopsPerCall, 2.0 * 512 * 4096 * 4096);
    EXPECT_LT(gemm->fittingNs, gemm->gpuNs);

    // Decode attention only (s_q = 1): the prefill's SDPA calls stay an attention group no problem fits.
    const TunableOp* attn = w.tunableFor("decode_attention");
    ASSERT_NE(attn, nullptr);
    EXPECT_EQ(attn->calls, 48u);
    const WorkloadShape* step = shapeOf(*attn, { { "B", 1 }, { "HQ", 32 }, { "MAXP", 33 } });
    ASSERT_NE(step, nullptr);
    EXPECT_EQ(step->shape.dims.at("D"), 128);
    EXPECT_EQ(step->shape.dims.at("PS"), 16);
    EXPECT_EQ(w.tunableFor("softmax"), nullptr); // no f16 softmax in this model
    EXPECT_EQ(w.tunableFor("mla_decode"), nullptr); // no trace_match rules

    // Every kernel is in one group, and the groups are shares of the whole.
    int64_t grouped = 0;
    for (const auto& g : w.groups)
        grouped += g.gpuNs;
    EXPECT_LE(grouped, w.gpuNs);
    EXPECT_GT(grouped, w.gpuNs * 9 / 10);
    EXPECT_TRUE(std::is_sorted(
        w.groups.begin(), w.groups.end(), [](const OpGroup& a, const OpGroup& b) { return a.gpuNs > b.gpuNs; }));
    EXPECT_TRUE(std::any_of(w.groups.begin(), w.groups.end(),
        [](const OpGroup& g) { return g.opClass == "attention" && g.problem.empty(); }));
}

// The phases are the model's forward passes, classed by their own content: the prefill apart from the 24 decode
// steps, which merge into one phase.
TEST(Workload, PhasesSeparateThePrefillFromTheDecodeSteps)
{
    const Workload& w = llamaWorkload();
    ASSERT_GE(w.phases.size(), 2u);
    EXPECT_EQ(w.phases.front().calls, 1u);
    EXPECT_EQ(w.phases.front().label, "LlamaForCausalLM");
    const auto decode = std::max_element(w.phases.begin(), w.phases.end(),
        [](const WorkloadPhase& a, const WorkloadPhase& b) { return a.calls < b.calls; });
    EXPECT_GE(decode->calls, 20u);
    EXPECT_EQ(decode->label, "LlamaForCausalLM x" + std::to_string(decode->calls));
    EXPECT_EQ(decode->bound, "launch-bound"); // the GPU is busy ~2% of a decode step here
    EXPECT_LT(decode->busyPct, 50);
    EXPECT_NE(decode->target.find("CUDA graph"), std::string::npos);
    uint64_t calls = 0;
    for (const auto& ph : w.phases)
        calls += ph.calls;
    EXPECT_EQ(calls, 25u);
}

namespace {

// A trace as Nsight Systems or a .kltrace gives it for PyTorch under emit_nvtx(record_shapes=True): the op's sizes
// live in the NVTX range's name.
struct NvtxBuilder {
    Trace t;
    uint32_t cpu = t.cpuRow(1, 1);
    uint32_t gpu = t.gpuRow(0, 7);
    uint32_t corr = 1;
    int64_t now = 0;

    void op(const std::string& range, int kernels, int64_t kernelNs)
    {
        Event r;
        r.start = now;
        r.row = cpu;
        r.kind = EventKind::NvtxRange;
        r.name = t.strings().intern(range);
        for (int i = 0; i < kernels; ++i) {
            const uint32_t c = corr++;
            Event api;
            api.start = now + 1000;
            api.end = now + 3000;
            api.row = cpu;
            api.kind = EventKind::RuntimeApi;
            api.name = t.strings().intern("cudaLaunchKernel");
            t.addEvent(api, c);
            Event k;
            k.start = now + 4000;
            k.end = now + 4000 + kernelNs;
            k.row = gpu;
            k.kind = EventKind::Kernel;
            k.name = t.strings().intern("elementwise_kernel");
            KernelInfo info;
            info.correlation = c;
            t.addKernel(k, info);
            now += 5000 + kernelNs;
        }
        r.end = now;
        t.addEvent(r);
        now += 1000;
    }
};

} // namespace

TEST(Workload, NvtxRangeSizesFromEmitNvtxAreOpInputs)
{
    NvtxBuilder b;
    b.op("aten::silu, seq = 3, op_id = 7, sizes = [[16, 28672]], input_op_ids = [(6, 0)]", 1, 20000);
    b.op("aten::mm, seq = 4, op_id = 8, sizes = [[16, 4096], [4096, 28672]]", 1, 50000);
    b.op("aten::mul, seq = 5, op_id = 9, sizes = [[16, 28672], [16, 28672]]", 1, 10000);
    b.op("aten::cat, seq = 6, op_id = 10, sizes = [[[16, 8], [16, 8]], []]", 1, 3000);
    b.t.finalize();
    const Workload w = analyzeWorkload(b.t, catalogue());
    EXPECT_EQ(w.opsWithShapes, 0u); // none recorded as args: the sizes came from the names
    const TunableOp* act = w.tunableFor("silu_and_mul");
    ASSERT_NE(act, nullptr);
    ASSERT_EQ(act->shapes.size(), 1u);
    EXPECT_EQ(act->shapes[0].shape.dims.at("T"), 16);
    EXPECT_EQ(act->shapes[0].shape.dims.at("I"), 28672);
    EXPECT_EQ(act->gpuNs, 30000); // the silu and the mul after it
    const TunableOp* gemm = w.tunableFor("gemm_bf16");
    ASSERT_NE(gemm, nullptr);
    EXPECT_EQ(gemm->shapes[0].shape.dims.at("N"), 28672);
    EXPECT_NE(gemm->shapes[0].outside.find("N=28672"), std::string::npos);
    const auto cat
        = std::find_if(w.groups.begin(), w.groups.end(), [](const OpGroup& g) { return g.name == "aten::cat"; });
    ASSERT_NE(cat, w.groups.end());
    EXPECT_EQ(cat->opClass, "copy");
}

// vLLM's fused kernels are ops of their own: fused_add_rms_norm is add_rmsnorm (not rmsnorm), and rotary_embedding
// is the problem only for its Llama-3-8B head layout (32 query and 8 key heads of 128 flattened), another model's is
// left alone rather than given the wrong constants.
TEST(Workload, VllmFusedAddRmsNormAndRotaryAreTheirProblems)
{
    NvtxBuilder b;
    b.op("_C::fused_add_rms_norm, seq = 1, op_id = 1, sizes = [[16, 4096], [16, 4096], [4096], []]", 1, 4000);
    b.op("_C::rotary_embedding, seq = 2, op_id = 2, sizes = [[16], [16, 4096], [16, 1024], [], [8192, 128], []]", 1,
        3000);
    b.op(
        "_C::rotary_embedding, seq = 3, op_id = 3, sizes = [[16], [16, 2048], [16, 512], [], [8192, 64], []]", 1, 3000);
    b.t.finalize();
    const Workload w = analyzeWorkload(b.t, catalogue());
    const TunableOp* norm = w.tunableFor("add_rmsnorm");
    ASSERT_NE(norm, nullptr);
    ASSERT_EQ(norm->shapes.size(), 1u);
    EXPECT_EQ(norm->shapes[0].shape.dims.at("T"), 16);
    EXPECT_EQ(norm->shapes[0].shape.dims.at("H"), 4096);
    EXPECT_EQ(w.tunableFor("rmsnorm"), nullptr);
    const TunableOp* rope = w.tunableFor("rotary_embedding");
    ASSERT_NE(rope, nullptr);
    ASSERT_EQ(rope->shapes.size(), 1u);
    EXPECT_EQ(rope->shapes[0].shape.dims.at("T"), 16);
    EXPECT_EQ(rope->shapes[0].shape.dims.at("HQ"), 32);
    EXPECT_EQ(rope->calls, 1u) << "the 16-head rotary is another model's";
}

TEST(Workload, ATraceWithoutShapesSaysHowToRecordThem)
{
    NvtxBuilder b;
    b.op("aten::silu", 2, 1000);
    b.t.finalize();
    const Workload w = analyzeWorkload(b.t, catalogue());
    EXPECT_TRUE(w.tunable.empty());
    ASSERT_FALSE(w.notes.empty());
    EXPECT_NE(w.notes.back().find("record_shapes=True"), std::string::npos);
    EXPECT_EQ(w.groups.at(0).name, "aten::silu");
    EXPECT_EQ(w.groups.at(0).kernels, 2u);
}

TEST(Workload, TuningShapesAreTheFittingShapesWeightedByTimeShare)
{
    const Workload& w = llamaWorkload();
    const Problem gemm = loadProblem(kSource + "/kernels/problems/gemm_bf16");
    const std::vector<Shape> shapes = tuningShapesFromWorkload(w, gemm, "trace", 4);
    ASSERT_EQ(shapes.size(), 4u);
    const TunableOp* op = w.tunableFor("gemm_bf16");
    double previous = 2;
    for (const auto& s : shapes) {
        std::string why;
        EXPECT_TRUE(gemm.shapeIsValid(s, &why)) << why;
        const WorkloadShape* ws = shapeOf(*op, s.dims);
        ASSERT_NE(ws, nullptr);
        EXPECT_NEAR(s.weight, double(ws->gpuNs) / double(op->fittingNs), 1e-12);
        EXPECT_LE(s.weight, previous);
        previous = s.weight;
    }
    const Problem softmax = loadProblem(kSource + "/kernels/problems/softmax");
    try {
        tuningShapesFromWorkload(w, softmax, "model.json", 8);
        FAIL() << "softmax is not in the trace";
    } catch (const InputError& e) {
        EXPECT_NE(
            std::string(e.what()).find("model.json: no operation of the trace fits problem softmax"), std::string::npos)
            << e.what();
    }
}

// Amdahl per shape: a 2x speedup at the decode shape saves half its time; time inside launch-bound phases does not
// shorten the run.
TEST(Workload, ProjectionAppliesMeasuredSpeedupsPerShape)
{
    const Workload& w = llamaWorkload();
    const TunableOp* norm = w.tunableFor("rmsnorm");
    ASSERT_NE(norm, nullptr);
    const WorkloadShape* decodeNorm = shapeOf(*norm, { { "T", 1 }, { "H", 4096 } });
    ASSERT_NE(decodeNorm, nullptr);
    ShapeResult r;
    r.shape = decodeNorm->shape;
    r.speedup = 2.0;
    const Projection p = projectGain(w, "rmsnorm", "c0007", { r });
    EXPECT_EQ(p.opNs, norm->gpuNs);
    ASSERT_EQ(p.shapes.size(), 2u);
    const auto measured
        = std::find_if(p.shapes.begin(), p.shapes.end(), [](const ProjectedShape& s) { return s.measured; });
    ASSERT_NE(measured, p.shapes.end());
    EXPECT_NEAR(double(measured->savedNs), double(decodeNorm->gpuNs) / 2, 1.0);
    EXPECT_EQ(p.savedNs, measured->savedNs); // the prefill shape was not measured: no saving claimed
    EXPECT_LE(p.savedOutsideLaunchBoundNs, p.savedNs);
    EXPECT_NEAR(p.kernelSavingPct, 100.0 * double(p.savedNs) / double(w.gpuNs), 1e-9);
    EXPECT_LE(p.endToEndPct, p.upperBoundPct);
    const nlohmann::json j = toJson(p);
    EXPECT_EQ(j.at("candidate"), "c0007");
    EXPECT_EQ(j.at("shapes").size(), 2u);
}

TEST(Workload, BadTraceMatchRulesAreRefusedNamingTheField)
{
    Json j = Json::parse(R"({"name": "p", "dims": [{"name": "T", "min": 1, "max": 8}],
        "tensors": [{"name": "y", "dtype": "f32", "shape": ["T"], "role": "output"}],
        "tuning_shapes": [{"dims": {"T": 4}}]})");
    auto refused = [&](const Json& rules, const std::string& expected) {
        Json p = j;
        p["trace_match"] = rules;
        try {
            problemFromJson(p, "p.json");
            ADD_FAILURE() << "accepted " << rules.dump();
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
        }
    };
    refused(Json::parse(R"([{"module": "Norm", "op": "aten::x", "dims": {"T": "in0_0"}}])"),
        "p.json.trace_match[0]: name exactly one of");
    refused(Json::parse(R"([{"op": "aten::x", "dims": {"T": "T + 1"}}])"), "p.json.trace_match[0].dims.T");
    refused(Json::parse(R"([{"op": "aten::x", "dims": {}}])"), "no expression for dim T");
    refused(Json::parse(R"([{"op": "aten::x", "dims": {"Q": "in0_0", "T": "in0_0"}}])"), "dims.Q: not a dim");
    refused(Json::parse(R"([{"op": "aten::x", "when": "in0_9 == 1", "dims": {"T": "in0_0"}}])"), "trace_match[0].when");
    refused(Json::parse(R"([{"op": "aten::x", "dims": {"T": "in0_0 +"}}])"), "trace_match[0].dims");
    Json ok = j;
    ok["trace_match"] = Json::parse(R"([{"op": "aten::x", "then": "aten::y", "dims": {"T": "in0_rows"}}])");
    const Problem p = problemFromJson(ok, "p.json");
    ASSERT_EQ(p.traceMatch.size(), 1u);
    EXPECT_EQ(p.traceMatch[0].describe(), "op aten::x (+ aten::y)");
    // The serialised form reads back to the same rules.
    const Problem again = problemFromJson(toJson(p), "again");
    ASSERT_EQ(again.traceMatch.size(), 1u);
    EXPECT_EQ(again.traceMatch[0].then, "aten::y");
    EXPECT_EQ(again.traceMatch[0].dims.at("T").text(), "in0_rows");
}
