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
    r.verifyMs = 3.25;
    e.shapes.push_back(r);
    e.objective = 1.31;
    const kl::Evaluation back = kl::evaluationFromJson(kl::toJson(e), "evaluation.json");
    EXPECT_EQ(kl::toJson(back), kl::toJson(e));
    EXPECT_EQ(back.shapes[0].checks[0].seed, 0xfeedfacecafebeefull);
    EXPECT_DOUBLE_EQ(back.shapes[0].verifyMs, 3.25);
}

TEST(EvaluationJson, AScreensFidelityAndDeviceTimeRoundTripAndBadOnesNameTheField)
{
    kl::Evaluation e;
    e.candidateId = "c0004";
    e.verdict = kl::Verdict::Correct;
    e.fidelity = kl::Fidelity { 5, 2 };
    e.deviceMs = 12.5;
    const kl::Json j = kl::toJson(e);
    EXPECT_EQ(j.at("fidelity"), (kl::Json { { "screen_samples", 5 }, { "screen_shapes", 2 } }));
    const kl::Evaluation back = kl::evaluationFromJson(j, "evaluation.json");
    EXPECT_EQ(back.fidelity, e.fidelity);
    EXPECT_DOUBLE_EQ(back.deviceMs, 12.5);
    // The full protocol writes nothing: records from before multi-fidelity search read the same.
    e.fidelity = {};
    e.deviceMs = 0;
    EXPECT_FALSE(kl::toJson(e).contains("fidelity"));
    EXPECT_FALSE(kl::toJson(e).contains("device_ms"));

    kl::Candidate c;
    c.id = "c0004";
    c.fidelity = kl::Fidelity { 8, 0 };
    EXPECT_EQ(kl::candidateFromJson(kl::toJson(c), "candidate").fidelity, c.fidelity);

    auto message = [](kl::Json bad) {
        try {
            kl::evaluationFromJson(bad, "evaluation.json");
        } catch (const kl::InputError& err) {
            return std::string(err.what());
        }
        return std::string();
    };
    kl::Json bad = j;
    bad["fidelity"]["screen_samples"] = 0;
    EXPECT_NE(message(bad).find("evaluation.json.fidelity.screen_samples"), std::string::npos) << message(bad);
    bad = j;
    bad["fidelity"] = "screen";
    EXPECT_NE(message(bad).find("evaluation.json.fidelity: expected an object"), std::string::npos) << message(bad);
    bad = j;
    bad["device_ms"] = -1;
    EXPECT_NE(message(bad).find("evaluation.json.device_ms"), std::string::npos) << message(bad);
}

TEST(Fidelity, ScreenShapesSpreadOverTheTuningListFirstAndLastIncluded)
{
    std::vector<kl::Shape> tuning(5);
    for (int i = 0; i < 5; ++i)
        tuning[static_cast<std::size_t>(i)].dims = { { "T", i } };
    auto ts = [&](kl::Fidelity f) {
        std::vector<std::int64_t> out;
        for (const kl::Shape& s : kl::screenTuningShapes(tuning, f))
            out.push_back(s.dims.at("T"));
        return out;
    };
    EXPECT_EQ(ts({}), (std::vector<std::int64_t> { 0, 1, 2, 3, 4 }));
    EXPECT_EQ(ts({ 5, 0 }), (std::vector<std::int64_t> { 0, 1, 2, 3, 4 }));
    EXPECT_EQ(ts({ 5, 1 }), (std::vector<std::int64_t> { 0 }));
    EXPECT_EQ(ts({ 5, 2 }), (std::vector<std::int64_t> { 0, 4 }));
    EXPECT_EQ(ts({ 5, 3 }), (std::vector<std::int64_t> { 0, 2, 4 }));
    EXPECT_EQ(ts({ 5, 9 }), (std::vector<std::int64_t> { 0, 1, 2, 3, 4 }));
    EXPECT_EQ(kl::Fidelity({ 5, 2 }).label(), "screen:5x2");
    EXPECT_EQ(kl::Fidelity({ 5, 0 }).label(), "screen:5xall");
    EXPECT_EQ(kl::Fidelity {}.label(), "full");
}

namespace {
// The message problemFromJson gives for j, or "" when it accepts it.
std::string problemError(const kl::Json& j)
{
    try {
        kl::problemFromJson(j, "p.json");
    } catch (const kl::InputError& e) {
        return e.what();
    }
    return {};
}

void expectRefused(const kl::Json& j, const std::string& prefix, const std::string& detail)
{
    const std::string why = problemError(j);
    EXPECT_EQ(why.rfind(prefix, 0), 0u) << why.substr(0, 400);
    EXPECT_NE(why.find(detail), std::string::npos) << why.substr(0, 400);
    EXPECT_LT(why.size(), 500u) << "the message abbreviates what it echoes";
}
} // namespace

// qa rows 9, 10: a dim or tensor declared twice was accepted.
TEST(ProblemValidation, DuplicateDimsTensorsAndScalarsAreRefused)
{
    auto j = problemJson();
    j["dims"].push_back(j["dims"][0]);
    expectRefused(j, "p.json.dims[2].name: ", "dim 'T': a dim of that name is declared already");
    j = problemJson();
    j["tensors"].push_back(j["tensors"][0]);
    expectRefused(j, "p.json.tensors[3].name: ", "tensor 'x': a tensor of that name is declared already");
    j = problemJson();
    j["scalars"].push_back({ { "name", "T" }, { "value", 1 } });
    expectRefused(j, "p.json.scalars[1].name: ", "scalar 'T': a dim of that name is declared already");
}

// qa rows 6, 7: "T T" and "min" were refused only indirectly ("shape lacks dim T T").
TEST(ProblemValidation, BadDimNamesSayBadDimName)
{
    for (const std::string name : { "T T", "min", "true", "1T", "" }) {
        auto j = problemJson();
        j["dims"][0]["name"] = name;
        expectRefused(j, "p.json.dims[0].name: ", "bad dim name '" + name + "'");
    }
    auto j = problemJson();
    j["tensors"][0]["name"] = "x-1";
    expectRefused(j, "p.json.tensors[0].name: ", "bad tensor name 'x-1'");
}

// qa row 16: a 10^6-character name was echoed in full in a 1 MB error line.
TEST(ProblemValidation, LongNamesAreAbbreviatedInMessages)
{
    auto j = problemJson();
    j["name"] = std::string(1000000, 'a') + "/";
    expectRefused(j, "p.json.name: 'aaaa", "...(1000001 chars)");
    j = problemJson();
    j["dims"][0]["name"] = std::string(1000000, '-');
    expectRefused(j, "p.json.dims[0].name: bad dim name", "...(1000000 chars)");
}

// qa rows 37, 39, 43: a tensor shape naming an unknown dim, dividing by zero or negative was accepted.
TEST(ProblemValidation, TensorShapesNameDimsAndEvaluateAtEveryShape)
{
    auto j = problemJson();
    j["tensors"][1]["shape"] = { "Z" };
    expectRefused(j, "p.json.tensors[1].shape[0]: 'Z' names 'Z', which is not a dim", "(dims: T, H)");
    j = problemJson();
    j["tensors"][2]["shape"] = { "T/0", "H" };
    expectRefused(j, "p.json.tensors[2].shape[0] at tuning_shapes[0] (H=8192,T=4096): ", "division by zero");
    j = problemJson();
    j["tensors"][0]["shape"] = { "T-100000", "H" };
    expectRefused(j, "p.json.tensors[0].shape[0] at tuning_shapes[0]", "is -95904, a negative extent");
    j = problemJson();
    j["tensors"][0]["shape"] = { "T/3.0", "H" };
    expectRefused(j, "p.json.tensors[0].shape[0] at tuning_shapes[0]", "is not an integer");
    j = problemJson();
    j["tensors"][0]["shape"] = kl::Json::array({ kl::Json::array({ "T" }) });
    expectRefused(j, "p.json.tensors[0].shape[0]: ", "expected an expression string or an integer");
}

// qa row 19: a 2^80-element tensor (T = H = 2^40) was accepted.
TEST(ProblemValidation, TensorsAbove2To40ElementsAreRefused)
{
    auto j = problemJson();
    j["dims"][0]["max"] = std::int64_t(1) << 40;
    j["dims"][1]["max"] = std::int64_t(1) << 40;
    j["tuning_shapes"][0]["dims"] = { { "T", std::int64_t(1) << 40 }, { "H", std::int64_t(1) << 40 } };
    expectRefused(j, "p.json.tensors[0].shape at tuning_shapes[0]", "more than the limit of 2^40");
    j = problemJson();
    j["tensors"][0]["shape"] = { "T", "H", "65536" }; // 2^41 elements at the tuning shape
    expectRefused(j, "p.json.tensors[0].shape at tuning_shapes[0]", "tensor x has");
}

// qa rows 3, 12: flops/bytes naming an unknown identifier or dividing by zero were accepted.
TEST(ProblemValidation, FlopsAndBytesNameDimsAndEvaluate)
{
    auto j = problemJson();
    j["flops"] = "4*T*H*Q";
    expectRefused(j, "p.json.flops: '4*T*H*Q' names 'Q', which is not a dim", "");
    j = problemJson();
    j["bytes"] = "4*T*H/(T-T)";
    expectRefused(j, "p.json.bytes at tuning_shapes[0] (H=8192,T=4096): ", "division by zero");
    j = problemJson();
    j["bytes"] = "T - 5000";
    expectRefused(j, "p.json.bytes at tuning_shapes[0]", "not a count");
}

// qa rows 44, 49: a negative tolerance (nothing passes) and all-zero weights (no objective) were accepted.
TEST(ProblemValidation, NegativeTolerancesAndAllZeroWeightsAreRefused)
{
    auto j = problemJson();
    j["tolerances"]["bf16"]["rel_l2"] = -1;
    expectRefused(j, "p.json.tolerances.bf16.rel_l2: must not be negative", "");
    j = problemJson();
    j["tolerances"]["bf16"]["max_abs"] = -0.5;
    expectRefused(j, "p.json.tolerances.bf16.max_abs: must not be negative", "");
    j = problemJson();
    j["tuning_shapes"][0]["weight"] = 0;
    j["tuning_shapes"].push_back({ { "dims", { { "T", 16 }, { "H", 1024 } } }, { "weight", 0 } });
    expectRefused(j, "p.json.tuning_shapes: every weight is 0", "");
    j["tuning_shapes"][1]["weight"] = 0.5;
    EXPECT_EQ(problemError(j), "");
}

// nlohmann parses iteratively; a 4 MB problem.json of nested arrays must give an error naming the field, not recurse.
TEST(ProblemValidation, DeeplyNestedJsonIsAnErrorNotACrash)
{
    const std::size_t depth = 300000;
    for (const char* key : { "flops", "dims", "tuning_shapes", "tolerances" }) {
        const std::string text
            = std::string("{\"name\":\"p\",\"") + key + "\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
        kl::Json j = kl::Json::parse(text);
        const std::string why = problemError(j);
        EXPECT_EQ(why.rfind("p.json.", 0), 0u) << key << ": " << why.substr(0, 300);
    }
}
