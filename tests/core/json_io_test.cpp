#include "core/errors.h"
#include "core/json_io.h"

#include <gtest/gtest.h>

namespace {
kl::Json problemJson()
{
    return kl::Json::parse(R"JSON({
      "name": "rmsnorm", "description": "RMSNorm", "tags": ["normalization"],
      "dims": [{"name": "T", "min": 1, "max": 65536}, {"name": "H", "min": 1024, "max": 16384, "multiple_of": 8}],
      "scalars": [{"name": "eps", "dtype": "f32", "value": 1e-6}],
      "tensors": [{"name": "x", "dtype": "bf16", "shape": ["T", "H"], "role": "input"},
                  {"name": "w", "dtype": "bf16", "shape": ["H"], "role": "input"},
                  {"name": "y", "dtype": "bf16", "shape": ["T", "H"], "role": "output"}],
      "tuning_shapes": [{"dims": {"T": 4096, "H": 8192}, "weight": 2}],
      "verify_shapes": [{"dims": {"T": 1, "H": 1024}}],
      "tolerances": {"bf16": {"rel_l2": 0.01, "max_abs": 0.1}},
      "flops": "4*T*H", "bytes": "2*(2*T*H + H)"})JSON");
}
} // namespace

TEST(ProblemJson, RoundTrips)
{
    const kl::Problem p = kl::problemFromJson(problemJson(), "problem.json");
    EXPECT_EQ(p.name, "rmsnorm");
    EXPECT_EQ(p.dims.size(), 2u);
    EXPECT_EQ(p.tensor("y")->role, kl::TensorRole::Output);
    EXPECT_EQ(p.bytes.evaluateInt(p.tuningShapes[0].bindings()), 2 * (2 * 4096 * 8192 + 8192));
    EXPECT_DOUBLE_EQ(p.toleranceFor(kl::DType::BF16).relL2, 0.01);
    const kl::Problem q = kl::problemFromJson(kl::toJson(p), "again");
    EXPECT_EQ(kl::toJson(q), kl::toJson(p));
}

TEST(ProblemJson, ErrorsNameTheField)
{
    auto expectField = [](kl::Json j, const std::string& field) {
        try {
            kl::problemFromJson(j, "p.json");
            FAIL() << "accepted";
        } catch (const kl::InputError& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
    };
    auto j = problemJson();
    j["dims"][1]["max"] = "big";
    expectField(j, "p.json.dims[1].max");
    j = problemJson();
    j["tensors"][0]["dtype"] = "f13";
    expectField(j, "p.json.tensors[0].dtype");
    j = problemJson();
    j["tuning_shapes"][0]["dims"]["H"] = 1000; // not a multiple of 8
    expectField(j, "tuning_shapes[0]");
    j = problemJson();
    j["dims"][0]["max"] = 1e300;
    expectField(j, "dims[0].max");
    j = problemJson();
    j["reference"] = "../../etc/passwd";
    expectField(j, "plain names");
    j = problemJson();
    j["name"] = "../x";
    expectField(j, "name");
}

TEST(EvaluationJson, RoundTrips)
{
    kl::Evaluation e;
    e.candidateId = "c0003";
    e.verdict = kl::Verdict::Accepted;
    e.reasons.push_back({ "physics.suspicious-jump", "3.1x over best", 0, false });
    kl::ShapeResult r;
    r.shape.dims = { { "T", 4096 }, { "H", 8192 } };
    r.correct = true;
    kl::TimingStats t;
    t.medianUs = 101.5;
    t.p10Us = 100.0;
    t.p90Us = 104.0;
    t.ciLowUs = 101.0;
    t.ciHighUs = 102.0;
    t.samples = 57;
    r.timing = t;
    r.speedup = 1.31;
    kl::CorrectnessStats c;
    c.relL2 = 3e-3;
    c.seed = 0xfeedfacecafebeefull;
    c.passed = true;
    r.checks.push_back(c);
    e.shapes.push_back(r);
    e.objective = 1.31;
    const kl::Evaluation back = kl::evaluationFromJson(kl::toJson(e), "evaluation.json");
    EXPECT_EQ(kl::toJson(back), kl::toJson(e));
    EXPECT_EQ(back.shapes[0].checks[0].seed, 0xfeedfacecafebeefull);
}
