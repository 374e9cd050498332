// The problems issue 19's pipelines are made of (add_rmsnorm, rotary_embedding, dsa_indexer, dsa_topk,
// sparse_mla_decode): their tensors are the interfaces the pipelines wire together, and the inputs with meaning hold
// what the kernels rely on at every shape the harness runs.
#include "core/json_io.h"
#include "core/loop_device_limits.h"
#include "kernels/shape_sampler.h"

#include <filesystem>
#include <gtest/gtest.h>
#include <set>

namespace {

const char* const kNewProblems[]
    = { "add_rmsnorm", "rotary_embedding", "dsa_indexer", "dsa_topk", "sparse_mla_decode" };

std::filesystem::path problemDir(const std::string& name)
{
    return std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems" / name;
}

kl::Problem problem(const std::string& name)
{
    return kl::loadProblem(problemDir(name).string());
}

// "name dtype role [extent, ...]" per tensor, in the order kernels name them.
std::string tensorsOf(const kl::Problem& p)
{
    std::string s;
    for (const auto& t : p.tensors) {
        s += t.name + " " + kl::dtypeName(t.dtype) + (t.role == kl::TensorRole::Output ? " out [" : " in [");
        for (std::size_t k = 0; k < t.shape.size(); ++k)
            s += (k ? ", " : "") + t.shape[k].text();
        s += "]\n";
    }
    return s;
}

std::int64_t constant(const kl::Problem& p, const std::string& name)
{
    const kl::DimSpec* d = p.dim(name);
    return d && d->constant ? d->min : -1;
}

// Every shape a verification or timing request may carry: the declared ones, the extremes and random held-out ones.
std::vector<kl::Shape> harnessShapes(const kl::Problem& p)
{
    std::vector<kl::Shape> shapes = kl::shapesOf(p);
    for (const auto& s : kl::heldOutShapes(p, 40, 7))
        shapes.push_back(p.withConstants(s));
    return shapes;
}

std::vector<std::int64_t> valuesOf(
    const kl::Problem& p, const std::string& tensor, const kl::Shape& s, std::uint64_t seed)
{
    const kl::TensorSpec& t = *p.tensor(tensor);
    std::uint64_t count = 1;
    for (const auto& e : t.shape)
        count *= static_cast<std::uint64_t>(e.evaluateInt(s.bindings()));
    return kl::intInputValues(t, s, count, seed);
}

} // namespace

// The names, dtypes and shapes fixed with the pipelines (round 5 interfaces): a change here breaks their wiring.
TEST(PipelineProblems, TensorsAreTheInterfacesThePipelinesWire)
{
    EXPECT_EQ(tensorsOf(problem("add_rmsnorm")),
        "y bf16 out [T, H]\nresidual_out bf16 out [T, H]\nx bf16 in [T, H]\nresidual bf16 in [T, H]\nw bf16 in [H]\n");
    EXPECT_EQ(tensorsOf(problem("rotary_embedding")),
        "q bf16 out [T, HQ, D]\nk bf16 out [T, HKV, D]\nv bf16 out [T, HKV, D]\n"
        "qkv bf16 in [T, (HQ + 2 * HKV) * D]\npositions i32 in [T]\ncos_sin_cache f32 in [MAXPOS, D]\n");
    EXPECT_EQ(tensorsOf(problem("dsa_indexer")),
        "scores f32 out [B, SQ, MAXP * PS]\nq_index bf16 in [B, SQ, HI, DI]\nweights f32 in [B, SQ, HI]\n"
        "k_index_cache bf16 in [B * MAXP, PS, DI]\nblock_table i32 in [B, MAXP]\nseq_lens i32 in [B]\n");
    EXPECT_EQ(tensorsOf(problem("dsa_topk")),
        "indices i32 out [B, SQ, TOPK]\nscores f32 in [B, SQ, MAXP * PS]\nseq_lens i32 in [B]\n");
    EXPECT_EQ(tensorsOf(problem("sparse_mla_decode")),
        "out bf16 out [B, SQ, HQ, DV]\nq bf16 in [B, SQ, HQ, DK]\nkv_cache bf16 in [B * MAXP, PS, DK]\n"
        "block_table i32 in [B, MAXP]\nindices i32 in [B, SQ, TOPK]\n");
    const kl::Problem rope = problem("rotary_embedding");
    EXPECT_EQ(constant(rope, "HQ"), 32);
    EXPECT_EQ(constant(rope, "HKV"), 8);
    EXPECT_EQ(constant(rope, "D"), 128);
    EXPECT_EQ(constant(rope, "MAXPOS"), 8192);
    const kl::Problem indexer = problem("dsa_indexer");
    EXPECT_EQ(constant(indexer, "HI"), 64);
    EXPECT_EQ(constant(indexer, "DI"), 128);
    EXPECT_EQ(constant(indexer, "PS"), 64);
    const kl::Problem topk = problem("dsa_topk");
    EXPECT_EQ(constant(topk, "TOPK"), 2048);
    EXPECT_EQ(constant(topk, "PS"), 64);
    EXPECT_EQ(topk.toleranceFor(kl::DType::I32).relL2, 0.0) << "selected positions are exact";
    EXPECT_EQ(topk.toleranceFor(kl::DType::I32).maxAbs, 0.0);
    const kl::Problem sparse = problem("sparse_mla_decode");
    for (const auto& [name, value] :
        { std::pair { "HQ", 128 }, { "DK", 576 }, { "DV", 512 }, { "PS", 64 }, { "TOPK", 2048 } })
        EXPECT_EQ(constant(sparse, name), value) << name;
    // The DSA stages share their free dims, so a pipeline binds them one to one.
    for (const auto* p : { &indexer, &topk, &sparse })
        for (const char* dim : { "B", "SQ", "MAXP" }) {
            ASSERT_NE(p->dim(dim), nullptr) << p->name << " " << dim;
            EXPECT_EQ(p->dim(dim)->max, dim == std::string("B") ? 128 : dim == std::string("SQ") ? 2 : 2048);
        }
}

// sparse_mla_decode reads the cache rows its indices name: every listed position is distinct and inside the
// sequence's MAXP pages, -1 fills the rest of a row, and rows with padding are drawn.
TEST(PipelineProblems, SparseIndicesAreDistinctPositionsOfTheSequenceThenPadding)
{
    const kl::Problem p = problem("sparse_mla_decode");
    const std::int64_t topk = constant(p, "TOPK");
    int paddedRows = 0, fullRows = 0;
    for (const auto& s : harnessShapes(p)) {
        const std::int64_t positions = s.dims.at("MAXP") * constant(p, "PS");
        const auto v = valuesOf(p, "indices", s, 99);
        ASSERT_EQ(v.size() % static_cast<std::size_t>(topk), 0u);
        for (std::size_t row = 0; row < v.size(); row += static_cast<std::size_t>(topk)) {
            std::set<std::int64_t> seen;
            std::size_t k = row;
            for (; k < row + static_cast<std::size_t>(topk) && v[k] >= 0; ++k) {
                ASSERT_LT(v[k], positions) << s.label();
                ASSERT_TRUE(seen.insert(v[k]).second) << s.label() << ": position " << v[k] << " twice in a row";
            }
            for (std::size_t rest = k; rest < row + static_cast<std::size_t>(topk); ++rest)
                ASSERT_EQ(v[rest], -1) << s.label() << ": -1 is padding, after the listed positions";
            ++(k == row + static_cast<std::size_t>(topk) ? fullRows : paddedRows);
        }
    }
    EXPECT_GT(paddedRows, 0);
    EXPECT_GT(fullRows, 0);
}

// dsa_topk's verification covers rows that see fewer tokens than TOPK (padding), exactly TOPK, and more (a real
// selection, with the ties of the harness's quantized scores at the threshold); the indexer's and topk's rows always
// see at least one token.
TEST(PipelineProblems, TopkVerificationSeesFewerExactlyAndMoreThanTopkTokens)
{
    const kl::Problem topk = problem("dsa_topk");
    const std::int64_t k = constant(topk, "TOPK");
    std::set<std::string> seen;
    for (const auto& shape : topk.verifyShapes) {
        const kl::Shape s = topk.withConstants(shape);
        const std::int64_t sq = s.dims.at("SQ");
        for (std::uint64_t seed = 1; seed <= 3; ++seed)
            for (const std::int64_t len : valuesOf(topk, "seq_lens", s, seed))
                for (std::int64_t j = 0; j < sq; ++j) {
                    const std::int64_t visible = len - sq + 1 + j;
                    ASSERT_GE(visible, 1) << s.label();
                    ASSERT_LE(visible, s.dims.at("MAXP") * 64) << s.label();
                    seen.insert(visible < k ? "fewer" : visible == k ? "exactly" : "more");
                }
    }
    EXPECT_EQ(seen, (std::set<std::string> { "fewer", "exactly", "more" }));
    for (const char* name : { "dsa_indexer", "dsa_topk" }) {
        const kl::Problem p = problem(name);
        for (const auto& s : harnessShapes(p))
            for (const std::int64_t len : valuesOf(p, "seq_lens", s, 5)) {
                EXPECT_GE(len - s.dims.at("SQ") + 1, 1) << name << " " << s.label();
                EXPECT_LE(len, s.dims.at("MAXP") * 64) << name << " " << s.label();
            }
    }
}

TEST(PipelineProblems, RotaryPositionsIndexTheCosSinCache)
{
    const kl::Problem p = problem("rotary_embedding");
    std::set<std::int64_t> positions;
    for (const auto& s : harnessShapes(p))
        for (const std::int64_t pos : valuesOf(p, "positions", s, 3)) {
            ASSERT_GE(pos, 0);
            ASSERT_LT(pos, constant(p, "MAXPOS"));
            positions.insert(pos);
        }
    EXPECT_GT(positions.size(), 4000u) << "positions spread over the cache";
}
