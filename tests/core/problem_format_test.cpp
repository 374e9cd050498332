// The problem format's meaning-carrying inputs (issue "Attention decode"): integer inputs with a value kind,
// constants, and scalars computed from dims, as a paged decode problem declares them.
#include "core/errors.h"
#include "core/json_io.h"

#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <set>

namespace {
kl::Json decodeJson()
{
    return kl::Json::parse(R"JSON({
      "name": "paged_decode", "description": "paged decode",
      "dims": [{"name": "B", "min": 1, "max": 256}, {"name": "L", "min": 1, "max": 131072},
               {"name": "PAGES", "min": 1, "max": 65536}],
      "constants": {"D": 128, "PS": 16},
      "scalars": [{"name": "scale", "dtype": "f32", "value": "1/sqrt(D + 64)"}, {"name": "eps", "value": 1e-6}],
      "tensors": [
        {"name": "o", "dtype": "bf16", "shape": ["B", "D"], "role": "output"},
        {"name": "q", "dtype": "bf16", "shape": ["B", "D"], "role": "input", "large_scale": 0.001},
        {"name": "block_table", "dtype": "i32", "shape": ["PAGES"], "role": "input", "values": {"kind": "permutation"}},
        {"name": "lens", "dtype": "i32", "shape": ["B"], "role": "input", "values": {"kind": "lengths", "low": 1, "high": "L"}},
        {"name": "pos", "dtype": "i64", "shape": ["B"], "role": "input", "values": {"kind": "range", "low": 0, "high": "L"}},
        {"name": "topk", "dtype": "i32", "shape": ["B", 64], "role": "input",
         "values": {"kind": "distinct", "high": "L", "pad_fraction": 0.25}}],
      "tuning_shapes": [{"dims": {"B": 16, "L": 4096, "PAGES": 4096}}],
      "verify_shapes": [{"dims": {"B": 3, "L": 40, "PAGES": 9, "D": 128}}],
      "flops": "4*B*L*D", "bytes": "2*B*L*D"})JSON");
}

std::string refusal(const kl::Json& j)
{
    try {
        kl::problemFromJson(j, "p.json");
    } catch (const kl::InputError& e) {
        return e.what();
    }
    return "accepted";
}

kl::Shape shapeOf(const kl::Problem& p, std::int64_t b, std::int64_t l, std::int64_t pages)
{
    kl::Shape s;
    s.dims = { { "B", b }, { "L", l }, { "PAGES", pages } };
    return p.withConstants(s);
}
} // namespace

TEST(ProblemFormat, ConstantsFillEveryShapeAndRoundTrip)
{
    const kl::Problem p = kl::problemFromJson(decodeJson(), "p.json");
    ASSERT_NE(p.dim("D"), nullptr);
    EXPECT_TRUE(p.dim("D")->constant);
    EXPECT_EQ(p.tuningShapes[0].dims.at("D"), 128);
    EXPECT_EQ(p.tuningShapes[0].dims.at("PS"), 16);
    EXPECT_EQ(p.verifyShapes[0].dims.at("D"), 128);
    EXPECT_EQ(p.tensor("block_table")->values.kind, kl::IntValues::Kind::Permutation);
    const kl::Problem q = kl::problemFromJson(kl::toJson(p), "again");
    EXPECT_EQ(kl::toJson(q), kl::toJson(p));
    EXPECT_EQ(kl::toJson(p).at("constants").at("D"), 128);
    EXPECT_EQ(q.tensor("topk")->values.padFraction, 0.25);
    EXPECT_EQ(q.tensor("q")->largeScale, 0.001) << "the large check's magnitude of q round-trips";
    EXPECT_EQ(q.tensor("o")->largeScale, 0) << "absent: 1000 x scale";

    auto j = decodeJson();
    j["tuning_shapes"][0]["dims"]["D"] = 64; // a constant is not a free dim
    EXPECT_NE(refusal(j).find("D=64 is outside [128, 128]"), std::string::npos) << refusal(j);
    j = decodeJson();
    j["tensors"][1]["large_scale"] = -1;
    EXPECT_NE(refusal(j).find("p.json.tensors[1].large_scale: must be a magnitude above 0"), std::string::npos)
        << refusal(j);
    j = decodeJson();
    j["constants"]["B"] = 4;
    EXPECT_NE(refusal(j).find("p.json.constants.B: constant 'B': a dim of that name"), std::string::npos) << refusal(j);
}

TEST(ProblemFormat, ScalarsComputedFromDims)
{
    const kl::Problem p = kl::problemFromJson(decodeJson(), "p.json");
    const kl::ScalarSpec* scale = p.scalar("scale");
    ASSERT_NE(scale, nullptr);
    ASSERT_TRUE(scale->formula.has_value());
    EXPECT_DOUBLE_EQ(scale->valueAt(p.tuningShapes[0].bindings()), 1.0 / std::sqrt(192.0));
    EXPECT_DOUBLE_EQ(p.scalar("eps")->valueAt(p.tuningShapes[0].bindings()), 1e-6);
    auto j = decodeJson();
    j["scalars"][0]["value"] = "1/sqrt(HEAD)";
    EXPECT_NE(
        refusal(j).find("p.json.scalars[0].value: '1/sqrt(HEAD)' names 'HEAD', which is not a dim"), std::string::npos)
        << refusal(j);
    j = decodeJson();
    j["scalars"][0]["value"] = "1/(D-128)";
    EXPECT_NE(refusal(j).find("p.json.scalars[0].value at tuning_shapes[0]"), std::string::npos) << refusal(j);
}

TEST(ProblemFormat, ValueKindsAreRefusedWhereTheyCannotHold)
{
    auto j = decodeJson();
    j["tensors"][1]["values"] = { { "kind", "range" }, { "high", "L" } };
    EXPECT_NE(refusal(j).find("p.json.tensors[1].values: tensor q is bf16; value kinds (range) are for i32 and i64"),
        std::string::npos)
        << refusal(j);
    j = decodeJson();
    j["tensors"][4]["values"]["high"] = "L - 4096"; // empty at the tuning shape
    EXPECT_NE(refusal(j).find("p.json.tensors[4].values at tuning_shapes[0]"), std::string::npos) << refusal(j);
    j = decodeJson();
    j["tensors"][3]["values"]["kind"] = "sorted";
    EXPECT_NE(refusal(j).find("p.json.tensors[3].values.kind: unknown kind 'sorted'"), std::string::npos) << refusal(j);
    j = decodeJson();
    j["tensors"][3]["values"]["high"] = "L * 1000000"; // beyond i32 at L = 4096
    EXPECT_NE(refusal(j).find("do not fit i32"), std::string::npos) << refusal(j);
    j = decodeJson();
    j["tensors"][5]["values"]["pad_fraction"] = 2;
    EXPECT_NE(refusal(j).find("p.json.tensors[5].values.pad_fraction"), std::string::npos) << refusal(j);
    j = decodeJson();
    j["tensors"][5]["values"].erase("high");
    EXPECT_NE(refusal(j).find("p.json.tensors[5].values"), std::string::npos) << refusal(j);
}

TEST(ProblemFormat, IntegerValuesHoldTheirMeaning)
{
    const kl::Problem p = kl::problemFromJson(decodeJson(), "p.json");
    const kl::Shape s = shapeOf(p, 64, 40, 1000);
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        const auto perm = kl::intInputValues(*p.tensor("block_table"), s, 1000, seed);
        std::vector<std::int64_t> sorted = perm;
        std::sort(sorted.begin(), sorted.end());
        for (std::int64_t i = 0; i < 1000; ++i)
            ASSERT_EQ(sorted[static_cast<std::size_t>(i)], i);

        const auto lens = kl::intInputValues(*p.tensor("lens"), s, 64, seed);
        EXPECT_EQ(*std::max_element(lens.begin(), lens.end()), 40) << "the longest sequence is always present";
        EXPECT_EQ(*std::min_element(lens.begin(), lens.end()), 1) << "so is the shortest";

        const auto pos = kl::intInputValues(*p.tensor("pos"), s, 64, seed);
        for (auto v : pos)
            ASSERT_TRUE(v >= 0 && v < 40) << v;
    }
    // distinct: 64 slots per row over 40 values -> 40 distinct values then -1 (or fewer, padded, in some rows)
    int paddedRows = 0;
    const auto topk = kl::intInputValues(*p.tensor("topk"), s, 64 * 64, 7);
    for (int r = 0; r < 64; ++r) {
        std::set<std::int64_t> seen;
        bool padding = false;
        int valid = 0;
        for (int c = 0; c < 64; ++c) {
            const std::int64_t v = topk[static_cast<std::size_t>(r * 64 + c)];
            if (v == -1) {
                padding = true;
                continue;
            }
            ASSERT_FALSE(padding) << "-1 only after the valid prefix (row " << r << ")";
            ASSERT_TRUE(v >= 0 && v < 40) << v;
            ASSERT_TRUE(seen.insert(v).second) << "duplicate " << v << " in row " << r;
            ++valid;
        }
        EXPECT_LE(valid, 40);
        paddedRows += valid < 40;
    }
    EXPECT_GT(paddedRows, 4) << "about a quarter of the rows are padded";
    EXPECT_LT(paddedRows, 40);

    EXPECT_EQ(kl::intInputValues(*p.tensor("topk"), s, 4096, 7), topk) << "the same seed gives the same values";
    EXPECT_NE(kl::intInputValues(*p.tensor("topk"), s, 4096, 8), topk);
    EXPECT_THROW(kl::intInputValues(*p.tensor("q"), s, 8, 1), std::invalid_argument);
}

TEST(ProblemFormat, DistinctRowsUseTheWholeRangeWhenItIsLarge)
{
    const kl::Problem p = kl::problemFromJson(decodeJson(), "p.json");
    kl::TensorSpec t = *p.tensor("topk");
    t.values.padFraction = 0;
    const auto v = kl::intInputValues(t, shapeOf(p, 4, 131072, 1), 4 * 64, 3);
    std::set<std::int64_t> all(v.begin(), v.end());
    EXPECT_EQ(all.count(-1), 0u);
    EXPECT_GT(*std::max_element(v.begin(), v.end()), 65536) << "indices reach the far end of a long context";
}

// In-place tensors (vLLM's fused_add_rms_norm): role "inout", read like an input and judged like an output.
TEST(ProblemFormat, InOutRoleParsesAndRoundTrips)
{
    const kl::Problem p = kl::loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/fused_add_rmsnorm");
    ASSERT_NE(p.tensor("x"), nullptr);
    EXPECT_EQ(p.tensor("x")->role, kl::TensorRole::InOut);
    EXPECT_EQ(p.tensor("residual")->role, kl::TensorRole::InOut);
    EXPECT_EQ(p.tensor("w")->role, kl::TensorRole::Input);
    const kl::Json j = kl::toJson(p);
    EXPECT_EQ(j["tensors"][0]["role"], "inout");
    EXPECT_EQ(j["tensors"][2]["role"], "input");
    const kl::Problem q = kl::problemFromJson(j, "again");
    EXPECT_EQ(q.tensor("x")->role, kl::TensorRole::InOut);
    EXPECT_EQ(kl::toJson(q), j);
    for (const auto r : { kl::TensorRole::Input, kl::TensorRole::Output, kl::TensorRole::InOut })
        EXPECT_EQ(kl::tensorRoleFromName(kl::tensorRoleName(r)), r);
    EXPECT_EQ(kl::tensorRoleFromName("in-out"), std::nullopt);
    EXPECT_TRUE(kl::readsInput(kl::TensorRole::InOut) && kl::writesOutput(kl::TensorRole::InOut));
    EXPECT_TRUE(kl::readsInput(kl::TensorRole::Input) && !kl::writesOutput(kl::TensorRole::Input));
    EXPECT_TRUE(!kl::readsInput(kl::TensorRole::Output) && kl::writesOutput(kl::TensorRole::Output));
}

TEST(ProblemFormat, RolesAreRefusedNamingTheField)
{
    kl::Json j = decodeJson();
    j["tensors"][1]["role"] = "in-out";
    const std::string why = refusal(j);
    EXPECT_NE(why.find("p.json.tensors[1].role: unknown role 'in-out'"), std::string::npos) << why;
    EXPECT_NE(why.find("inout"), std::string::npos) << why << ": the message names the roles there are";

    // The only result may be an in-place tensor; a problem with nothing written is refused.
    j = decodeJson();
    j["tensors"][0]["role"] = "inout";
    EXPECT_EQ(refusal(j), "accepted");
    j["tensors"][0]["role"] = "input";
    EXPECT_NE(refusal(j).find("p.json.tensors: at least one output (or inout tensor) is required"), std::string::npos)
        << refusal(j);

    // An in-place integer tensor is filled like an input, so it may say what its values mean; an output may not.
    j = decodeJson();
    j["tensors"][5]["role"] = "inout";
    EXPECT_EQ(refusal(j), "accepted");
    j["tensors"][5]["role"] = "output";
    EXPECT_NE(refusal(j).find("tensors[5].values: tensor topk is an output"), std::string::npos) << refusal(j);
}
