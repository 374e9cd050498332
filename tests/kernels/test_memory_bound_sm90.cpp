// The Hopper paths of the memory-bound problems: rmsnorm's cluster-split decode template (not yet its seed) parses
// against its problem, passes the referee, keeps every point of its space valid and within an H200 at every shape the
// harness runs, and compiles for sm_90a without spills; it launches one of its two kernels per shape, exactly over the
// rows that kernel covers (its grid formula and the kernel's split agree), and has the cluster barrier and distributed
// shared-memory loads exactly where SPLIT > 1. softmax's template at RING=1 compiles without spills, copies with
// cp.async.bulk on mbarriers and, split over a cluster, sends its partials with st.async. The GPU side is
// tests/kernels/test_hopper_gpu.cpp.
#include "agent/tuner/search_space.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/loop_device_limits.h"
#include "kernels/referee/referee.h"
#include "tests/kernels/tensor_core_compile_check.h"
#include "tests/support/text_file.h"

#include <filesystem>
#include <gtest/gtest.h>

namespace {

const std::filesystem::path kProblems = std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems";

using kl::test::harnessShapes;

// A problem with its template_sm90.cu parsed against it.
class Sm90TemplateTest : public ::testing::Test, protected kl::test::CandidateFile {
protected:
    void load(const std::string& name, const std::string& file = "template_sm90.cu")
    {
        CandidateFile::load(kProblems / name, kProblems / name / file);
    }
    // The PTX of the template compiled for sm_90a at each point, each module checked by expectModulesWithoutSpills.
    std::vector<std::string> compileWithoutSpills(const std::vector<kl::ParamValues>& points) const
    {
        const auto modules = kl::test::compilePoints(source, spec, points, { "sm_90a" });
        kl::test::expectModulesWithoutSpills(modules, spec, problem);
        std::vector<std::string> ptx;
        for (const auto& [where, m] : modules)
            ptx.push_back(m->ptx);
        return ptx;
    }
};

class Sm90Template : public Sm90TemplateTest, public ::testing::WithParamInterface<const char*> {
protected:
    void SetUp() override { load(GetParam()); }
};

class RmsnormSm90 : public Sm90TemplateTest {
protected:
    void SetUp() override { load("rmsnorm"); }
};

class SoftmaxRing : public Sm90TemplateTest {
protected:
    void SetUp() override { load("softmax", "template.cu"); }
};

} // namespace

TEST_P(Sm90Template, IsNotYetASeedAndPassesTheRefereeAndFitsAnH200AtEveryShapeAcrossItsSpace)
{
    for (const auto& [arch, file] : problem.archTemplates)
        EXPECT_NE(file, "template_sm90.cu") << "sm_" << arch << " seeds from a template no GPU has verified";
    for (const auto& r : kl::referee::checkSource(source, problem))
        ADD_FAILURE() << r.rule << " line " << r.line << ": " << r.message;
    const auto shapes = harnessShapes(problem);
    const auto space = spec.enumerateSpace();
    ASSERT_GT(space.size(), 1u);
    for (const auto& point : space) {
        for (const auto& shape : shapes) {
            std::string why;
            EXPECT_TRUE(spec.satisfies(point, shape.bindings(), &why)) << shape.label() << ": " << why;
        }
        const auto v = kl::checkDeviceLimits(spec, point, shapes, kl::test::deviceModel(9, 0, 227));
        EXPECT_FALSE(v.has_value()) << (v ? v->rule + ": " + v->message : "");
    }
}

INSTANTIATE_TEST_SUITE_P(MemoryBound, Sm90Template, ::testing::Values("rmsnorm"));

// Two kernels, one launched per shape: the cluster path (SPLIT blocks per group of rows) when the rows alone would
// leave SMs without a block, else one block per group of rows. The kernel gives block r of a cluster vectors
// [r*S, (r+1)*S) of each row (S = ceil(H/VEC / split)) and as many rows per block as THREADS over the threads one
// slice needs. At every point and shape exactly one kernel runs, its grid covers every row once per rank, no rank
// is left without vectors of the row, the slices cover the row exactly, and the split serves only shapes with
// fewer row blocks than SMs.
TEST_F(RmsnormSm90, OneKernelPerShapeCoversEveryRowAndEverySliceOfIt)
{
    ASSERT_EQ(spec.launches.size(), 2u);
    const auto& cluster = spec.launches[0];
    const auto& rows = spec.launches[1];
    ASSERT_EQ(cluster.kernel, "rmsnorm_cluster");
    ASSERT_EQ(rows.kernel, "rmsnorm_rows");
    ASSERT_TRUE(cluster.hasCluster);
    const std::int64_t smCount = 132;
    int clusterShapes = 0, rowShapes = 0;
    for (const auto& point : spec.enumerateSpace())
        for (const auto& shape : harnessShapes(problem)) {
            kl::Bindings b = kl::bindingsFor(point, shape.bindings());
            b["SM_COUNT"] = smCount;
            const std::int64_t threads = b.at("THREADS"), vec = b.at("VEC");
            const std::int64_t T = b.at("T"), H = b.at("H");
            ASSERT_EQ(H % vec, 0) << shape.label();
            const std::int64_t nvec = H / vec;
            auto rowsPerBlock = [&](std::int64_t split) {
                const std::int64_t slice = (nvec + split - 1) / split;
                const std::int64_t need = (slice + b.at("CACHE") - 1) / b.at("CACHE");
                std::int64_t tpr = b.at("MINTPR");
                while (tpr < need && tpr < threads)
                    tpr *= 2;
                return threads / tpr;
            };
            const std::int64_t clusterGrid = cluster.grid[0].evaluateInt(b), rowGrid = rows.grid[0].evaluateInt(b);
            const std::string where = shape.label() + " SPLIT=" + std::to_string(b.at("SPLIT"))
                + " THREADS=" + std::to_string(threads) + " VEC=" + std::to_string(vec);
            ASSERT_TRUE((clusterGrid > 0) != (rowGrid > 0)) << where << ": exactly one kernel runs";
            const std::int64_t plainBlocks = (T + rowsPerBlock(1) - 1) / rowsPerBlock(1);
            if (rowGrid > 0) {
                ++rowShapes;
                EXPECT_EQ(rowGrid, plainBlocks) << where;
                EXPECT_TRUE(b.at("SPLIT") == 1 || plainBlocks >= smCount) << where;
                continue;
            }
            ++clusterShapes;
            const std::int64_t split = b.at("SPLIT"), slice = (nvec + split - 1) / split;
            EXPECT_LT(plainBlocks, smCount) << where;
            ASSERT_EQ(cluster.cluster[0].evaluateInt(b), split) << where;
            ASSERT_EQ(clusterGrid % split, 0) << where;
            EXPECT_EQ(clusterGrid / split, (T + rowsPerBlock(split) - 1) / rowsPerBlock(split)) << where;
            EXPECT_GT(nvec - (split - 1) * slice, 0) << where;
        }
    EXPECT_GT(clusterShapes, 0);
    EXPECT_GT(rowShapes, 0);
}

// SPLIT = 1 is the plain kernel (no cluster instruction); SPLIT > 1 combines through the cluster, at the defaults and
// at decode points (one row per block of a slice, a slice read in chunks, a ragged last slice at VEC = 2).
TEST_F(RmsnormSm90, CompilesForSm90aWithoutSpillsAndCombinesThroughTheClusterWhenSplit)
{
    const std::vector<kl::ParamValues> points = { {},
        { { "SPLIT", 8 }, { "THREADS", 128 }, { "CACHE", 1 }, { "MINTPR", 128 } },
        { { "SPLIT", 4 }, { "THREADS", 64 }, { "CACHE", 2 }, { "MINTPR", 64 } },
        { { "SPLIT", 2 }, { "THREADS", 512 }, { "VEC", 2 }, { "CACHE", 16 } }, { { "SPLIT", 4 }, { "PRELOAD_W", 1 } },
        { { "SPLIT", 2 }, { "VEC", 2 }, { "CACHE", 16 }, { "PRELOAD_W", 1 } } };
    const auto ptx = compileWithoutSpills(points);
    ASSERT_EQ(ptx.size(), points.size());
    for (std::size_t i = 0; i < ptx.size(); ++i) {
        const bool split = i > 0; // the module holds both kernels; the cluster one combines only when SPLIT > 1
        for (const char* instruction :
            { "barrier.cluster.arrive", "barrier.cluster.wait", "mapa.shared::cluster", "ld.shared::cluster.f32" })
            EXPECT_EQ(ptx[i].find(instruction) != std::string::npos, split) << "point " << i << ": " << instruction;
    }
}

// RING=1 at its defaults (a row of 32768 kept in the ring of 4 x 8192, three blocks per SM), the deepest ring of the
// widest chunks in one block per SM, a ring of exactly 48 KiB, and rows split over clusters of four. PERSIST only sets
// the grid: the kernel is the same.
TEST_F(SoftmaxRing, CompilesForSm90aWithoutSpillsAndFeedsTheRingWithBulkCopies)
{
    const std::vector<kl::ParamValues> points
        = { { { "RING", 1 } }, { { "RING", 1 }, { "THREADS", 512 }, { "STAGES", 12 }, { "BPS", 1 } },
              { { "RING", 1 }, { "CHUNK", 2048 }, { "STAGES", 12 } },
              { { "RING", 1 }, { "CHUNK", 2048 }, { "BPS", 2 }, { "CLUSTER", 4 } } };
    const auto ptx = compileWithoutSpills(points);
    ASSERT_EQ(ptx.size(), points.size());
    for (const auto& module : ptx)
        for (const char* instruction :
            { "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
                "mbarrier.arrive.expect_tx.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64", "bar.sync 1" })
            EXPECT_NE(module.find(instruction), std::string::npos) << instruction;
    const char* send = "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32";
    EXPECT_EQ(ptx[0].find(send), std::string::npos) << "one block per row sends nothing";
    EXPECT_NE(ptx[3].find(send), std::string::npos);
}

// The kernel's blocks take rows blockIdx / CLUSTER, then every gridDim / CLUSTER-th: at every point of the sm_90 space
// and every harness shape exactly one kernel runs, the ring's grid is whole clusters of at least one and at most R,
// a cluster per row at PERSIST=0 and BPS blocks per SM (whole clusters) at PERSIST=1, so every row is taken once.
TEST_F(SoftmaxRing, RingGridIsWholeClustersThatTakeEveryRowOnce)
{
    ASSERT_EQ(spec.launches.size(), 2u);
    const auto& rows = spec.launches[0];
    const auto& ring = spec.launches[1];
    ASSERT_EQ(ring.kernel, "softmax_ring");
    const auto space
        = kl::tuner::SearchSpace::build(spec, kl::shapesOf(problem), kl::test::deviceModel(9, 0, 227, 2048));
    int persistent = 0, perRow = 0;
    for (std::size_t i = 0; i < space.size(); ++i)
        for (const auto& shape : harnessShapes(problem)) {
            kl::Bindings b = kl::bindingsFor(space.config(i), shape.bindings());
            b["SM_COUNT"] = 132;
            const std::int64_t grid = ring.grid[0].evaluateInt(b), cluster = b.at("CLUSTER"), R = b.at("R");
            const std::string where = shape.label() + " point " + std::to_string(i);
            ASSERT_TRUE((grid > 0) != (rows.grid[0].evaluateInt(b) > 0)) << where << ": exactly one kernel runs";
            if (b.at("RING") == 0)
                continue;
            ASSERT_EQ(grid % cluster, 0) << where;
            const std::int64_t clusters = grid / cluster;
            EXPECT_GE(clusters, 1) << where;
            EXPECT_LE(clusters, R) << where;
            if (b.at("PERSIST") == 0) {
                ++perRow;
                EXPECT_EQ(clusters, R) << where;
            } else {
                ++persistent;
                EXPECT_EQ(clusters, std::min(R, std::max<std::int64_t>(1, 132 * b.at("BPS") / cluster))) << where;
            }
        }
    EXPECT_GT(persistent, 0);
    EXPECT_EQ(perRow, persistent) << "PERSIST doubles every ring point";
}
