// Hopper candidates without a GPU: gemm_bf16's sm_90a template (TMA tensor maps, mbarriers, wgmma, setmaxnreg,
// programmatic dependent launch, the skinny path's cluster reduction through distributed shared memory) compiles
// with NVRTC at its defaults and at points across its space, emits the instructions it is written for, and passes
// the referee's source and PTX rules; its two paths split the shapes at M = 128 and the skinny path's launch gives
// its kernel what it needs at every shape and SM count; the problem picks it on sm_90 and the portable template
// below.
#include "core/device.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/loop_device_limits.h"
#include "kernels/nvrtc_compiler.h"
#include "kernels/referee/referee.h"
#include "kernels/shape_sampler.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text_file.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <sstream>
#include <tuple>

namespace {

const std::filesystem::path kGemm = std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems" / "gemm_bf16";

// The skinny kernel's static shared memory: a full and an empty mbarrier for each of at most 32 ring stages.
constexpr int kSkinnyStaticSmem = 2 * 32 * 8;

std::string reasonsText(const std::vector<kl::VerdictReason>& reasons)
{
    std::string s;
    for (const auto& r : reasons)
        s += r.rule + " line " + std::to_string(r.line) + ": " + r.message + "\n";
    return s;
}

// The problem's own shapes, held-out ones, and the edges of both paths and of the tiles (M around 16, 32, 64 and 128;
// N and K at and past tile multiples), every one the problem accepts.
std::vector<kl::Shape> shapesAtThePathsEdges(const kl::Problem& p)
{
    std::vector<kl::Shape> shapes = kl::shapesOf(p);
    for (const auto& s : kl::heldOutShapes(p, 200, 7))
        shapes.push_back(s);
    for (const std::int64_t m : { 1, 2, 15, 16, 17, 31, 33, 64, 65, 100, 127, 128, 129, 8192 })
        for (const std::int64_t n : { 256, 320, 4096, 4160, 14336, 16384 })
            for (const std::int64_t k : { 256, 320, 4096, 14336, 16384 }) {
                kl::Shape s;
                s.dims = { { "M", m }, { "N", n }, { "K", k } };
                if (p.shapeIsValid(s))
                    shapes.push_back(s);
            }
    return shapes;
}

// Every combination of the named parameters' declared values, the other parameters as in base.
std::vector<kl::ParamValues> combinations(
    const kl::KernelSpec& spec, const kl::ParamValues& base, const std::vector<std::string>& names)
{
    std::vector<kl::ParamValues> out { base };
    for (const auto& name : names) {
        std::vector<kl::ParamValues> next;
        for (const auto& v : out)
            for (const std::int64_t value : spec.param(name)->values) {
                kl::ParamValues w = v;
                w[name] = value;
                next.push_back(std::move(w));
            }
        out = std::move(next);
    }
    return out;
}

} // namespace

TEST(HopperGemmTemplate, ChosenOnSm90AndNotBelow)
{
    const kl::Problem p = kl::loadProblem(kGemm.string());
    EXPECT_EQ(p.templateFor(90), "template_sm90.cu");
    EXPECT_EQ(p.templateFor(100), "template_sm90.cu");
    EXPECT_EQ(p.templateFor(89), "template.cu");
    EXPECT_EQ(p.templateFor(0), "template.cu");
    // The field round-trips through the session's copy of the problem.
    EXPECT_EQ(kl::problemFromJson(kl::toJson(p), "copy").archTemplates, p.archTemplates);
}

TEST(HopperGemmTemplate, CompilesForSm90aAcrossItsSpaceAndPassesTheReferee)
{
    const kl::Problem p = kl::loadProblem(kGemm.string());
    const std::string src = kl::test::readTextFile(kGemm / p.templateFor(90));
    const kl::KernelSpec spec = kl::parseKernelSpec(src, p);
    EXPECT_EQ(spec.tensorMaps.size(), 5u);
    ASSERT_EQ(spec.launches.size(), 4u);
    EXPECT_TRUE(spec.launches[2].programmaticLaunch);
    EXPECT_TRUE(spec.launches[3].hasCluster);
    EXPECT_EQ(reasonsText(kl::referee::checkSource(src, p)), "");

    const std::vector<kl::ParamValues> points = {
        spec.defaults(),
        { { "BM", 64 }, { "BN", 128 }, { "STAGES", 6 }, { "SPLITK", 4 }, { "GROUP", 1 }, { "RASTER", 1 } },
        { { "BM", 64 }, { "BN", 64 }, { "STAGES", 2 }, { "SPLITK", 16 }, { "GROUP", 16 }, { "RASTER", 0 } },
        { { "BM", 128 }, { "BN", 128 }, { "STAGES", 5 }, { "SPLITK", 1 }, { "GROUP", 8 }, { "RASTER", 1 } },
        { { "BM", 128 }, { "BN", 256 }, { "STAGES", 4 }, { "REGSPLIT", 1 } },
        { { "SBN", 64 }, { "SKMAX", 2 } },
        { { "SBN", 256 }, { "SKMAX", 8 } },
        { { "FIT", 1 }, { "BN", 128 }, { "STAGES", 6 }, { "SPLITK", 2 } },
        { { "FIT", 1 }, { "BN", 128 }, { "STAGES", 6 }, { "SPLITK", 4 }, { "REDUCE", 2 }, { "REGSPLIT", 1 } },
        { { "FIT", 1 }, { "BM", 64 }, { "BN", 256 }, { "STAGES", 5 }, { "SPLITK", 4 }, { "REDUCE", 1 }, { "CM", 2 } },
    };
    kl::NvrtcCompiler compiler(kl::test::freshDir("test-cache-hopper"), 2);
    std::vector<std::future<std::shared_ptr<const kl::CompiledModule>>> modules;
    kl::ParamValues fixedSplit = spec.defaults(); // the other points set their split and reduction themselves
    fixedSplit["FIT"] = 0;
    fixedSplit["REDUCE"] = 0;
    fixedSplit["SPLITK"] = 1;
    for (std::size_t i = 0; i < points.size(); ++i) {
        const kl::ParamValues& point = points[i];
        kl::ParamValues full = i == 0 ? spec.defaults() : fixedSplit;
        for (const auto& [k, v] : point)
            full[k] = v;
        spec.requireValidParams(full);
        kl::CompileJob job;
        job.source = src;
        job.params = full;
        job.arch = "sm_90a";
        for (const auto& l : spec.launches)
            job.kernels.push_back(l.kernel);
        modules.push_back(compiler.submit(job));
    }
    for (std::size_t i = 0; i < modules.size(); ++i) {
        const auto m = modules[i].get();
        ASSERT_TRUE(m->report.ok) << "point " << i << ":\n" << m->report.log;
        EXPECT_FALSE(m->cubin.empty());
        // The skinny path: a wgmma per token tile (n16 .. n128), the partial tiles summed over the cluster.
        for (const char* instruction : { "wgmma.mma_async.sync.aligned", "cp.async.bulk.tensor.2d",
                 "mbarrier.try_wait.parity", "griddepcontrol.wait", "wgmma.mma_async.sync.aligned.m64n16k16",
                 "wgmma.mma_async.sync.aligned.m64n32k16", "wgmma.mma_async.sync.aligned.m64n64k16",
                 "wgmma.mma_async.sync.aligned.m64n128k16", "mapa.shared::cluster", "ld.shared::cluster.v4.f32",
                 "barrier.cluster.arrive.release", "barrier.cluster.wait", "%dynamic_smem_size" })
            EXPECT_NE(m->ptx.find(instruction), std::string::npos) << "point " << i << " lacks " << instruction;
        // The register split is a preprocessor branch on the parameters (a constexpr would hide it from #if).
        const bool regsplit = points[i].count("REGSPLIT") && points[i].at("REGSPLIT") == 1;
        EXPECT_EQ(m->ptx.find("setmaxnreg.dec.sync.aligned.u32 40") != std::string::npos, regsplit) << "point " << i;
        EXPECT_EQ(m->ptx.find("setmaxnreg.inc.sync.aligned.u32 232") != std::string::npos, regsplit) << "point " << i;
        // The accumulators stay in registers: a spill would put every MMA result through local memory.
        for (const auto& k : m->report.kernels) {
            EXPECT_EQ(k.spillStores, 0) << "point " << i << " " << k.kernel << "\n" << m->report.log;
            EXPECT_EQ(k.localBytes, 0) << "point " << i << " " << k.kernel;
            if (k.kernel == "gemm_skinny") { // its barriers: the geometry test below counts on this much
                EXPECT_LE(k.staticSharedBytes, kSkinnyStaticSmem) << "point " << i;
            }
        }
        EXPECT_EQ(reasonsText(kl::referee::checkPtx(m->ptx, p)), "") << "point " << i;
        std::cout << "[ hopper ] point " << i << " compile " << m->report.compileMs << " ms\n";
    }
}

// The plan's two paths split the shapes at M = SKINNY_M (at most 128, the regimes' boundary): at M <= SKINNY_M only
// the skinny kernel runs
// (the persistent kernel and its split-K reduction get a grid of 0 and their workspaces no bytes, so a timed graph
// holds one kernel node and no memset), above it only the persistent one. The skinny launch gives its kernel what it
// assumes at every shape the harness may run (tuning, verify, held-out ones with the extremes, the regime edges) and
// SM count: S = gridDim.x splits of K as one cluster (1..8, at most SKMAX, at most one per 64-wide k-block), a column
// of blocks per SBN weight rows, more than one split only while every split's block has an SM; shared memory for at
// least two ring stages of this M's token tile (16, 32, 64 or 128 tokens) and for the fp32 partial tile, within the
// opt-in limit, and for two blocks on one SM where there are up to twice as many blocks as SMs.
TEST(HopperGemmTemplate, SkinnyAndPersistentPathsSplitTheShapesAndTheSkinnyLaunchFitsItsKernel)
{
    const kl::Problem p = kl::loadProblem(kGemm.string());
    const kl::KernelSpec spec = kl::parseKernelSpec(kl::test::readTextFile(kGemm / p.templateFor(90)), p);
    ASSERT_EQ(spec.launches.size(), 4u);
    const kl::LaunchStep& persistent = spec.launches[0];
    const kl::LaunchStep& narrow = spec.launches[1];
    const kl::LaunchStep& reduce = spec.launches[2];
    const kl::LaunchStep& skinny = spec.launches[3];
    ASSERT_EQ(skinny.kernel, "gemm_skinny");

    const std::vector<kl::Shape> shapes = shapesAtThePathsEdges(p);
    // Every skinny point with the persistent path's defaults, and persistent points with the skinny defaults; FIT = 0
    // (FittedLaunches... checks FIT = 1).
    kl::ParamValues fixedSplit = spec.defaults();
    fixedSplit["FIT"] = 0;
    fixedSplit["REDUCE"] = 0;
    std::vector<kl::ParamValues> points = combinations(spec, fixedSplit, { "SBN", "SKMAX", "SKINNY_M" });
    for (const auto& v : combinations(spec, fixedSplit, { "BM", "SPLITK", "REDUCE", "CM" }))
        if (spec.satisfies(v, {}))
            points.push_back(v);

    int splitShapes = 0, unsplitShapes = 0;
    for (const auto& point : points)
        for (const auto& shape : shapes) {
            ASSERT_TRUE(spec.satisfies(point, shape.bindings())) << shape.label();
            for (const std::int64_t sms : { 8, 16, 78, 114, 132, 148 }) {
                kl::Bindings b = kl::bindingsFor(point, shape.bindings());
                b[kl::kSmCountIdentifier] = static_cast<double>(sms);
                const std::int64_t M = shape.dims.at("M"), N = shape.dims.at("N"), K = shape.dims.at("K");
                const std::int64_t sbn = point.at("SBN");
                const std::string where = shape.label() + " SM_COUNT=" + std::to_string(sms)
                    + " SBN=" + std::to_string(sbn) + " SKMAX=" + std::to_string(point.at("SKMAX"));
                const std::int64_t splits = skinny.grid[0].evaluateInt(b);
                if (M > point.at("SKINNY_M")) {
                    ASSERT_EQ(splits, 0) << where;
                    ASSERT_GE(persistent.grid[0].evaluateInt(b), 1) << where;
                    ASSERT_EQ(narrow.grid[0].evaluateInt(b), 0) << where; // FIT = 0 at these points
                    continue;
                }
                ASSERT_EQ(persistent.grid[0].evaluateInt(b), 0) << where;
                ASSERT_EQ(narrow.grid[0].evaluateInt(b), 0) << where;
                ASSERT_EQ(reduce.grid[0].evaluateInt(b), 0) << where;
                for (const auto& w : spec.workspaces)
                    ASSERT_EQ(w.bytes.evaluateInt(b), 0) << where << " " << w.name;

                ASSERT_GE(splits, 1) << where;
                ASSERT_LE(splits, std::min<std::int64_t>({ 8, point.at("SKMAX"), K / 64 })) << where;
                const std::int64_t tiles = skinny.grid[1].evaluateInt(b);
                ASSERT_EQ(tiles, (N + sbn - 1) / sbn) << where;
                ASSERT_EQ(skinny.grid[2].evaluateInt(b), 1) << where;
                if (splits > 1) {
                    ASSERT_LE(splits * tiles, sms) << where;
                }
                const std::int64_t grid[3] = { splits, tiles, 1 };
                const std::int64_t cluster[3] = { skinny.cluster[0].evaluateInt(b), skinny.cluster[1].evaluateInt(b),
                    skinny.cluster[2].evaluateInt(b) };
                ASSERT_EQ(cluster[0], splits) << where;
                ASSERT_EQ(kl::clusterProblem(grid, cluster), "") << where;
                ASSERT_EQ(skinny.block[0].evaluateInt(b), (sbn / 64 + 1) * 128) << where;

                std::int64_t tokens = 16;
                while (tokens < M)
                    tokens *= 2;
                const std::int64_t smem = skinny.sharedBytes.evaluateInt(b);
                const std::int64_t stages = (smem - 1024) / ((sbn + tokens) * 128); // as the kernel derives them
                ASSERT_GE(stages, 2) << where;
                ASSERT_LE(stages, kSkinnyStaticSmem / 16) << where; // one full and one empty barrier per stage
                ASSERT_GE(smem - 1024, tokens * (sbn + 4) * 4) << where; // the partial tile overlays the ring
                ASSERT_LE(smem + kSkinnyStaticSmem, 227 * 1024) << where;
                // More blocks than SMs (64-row tiles of a wide N): two share an SM's 228 KiB, 1 KiB reserved each
                // (on Hopper-sized SM counts; with 8 SMs a 256 x 128 fp32 partial tile alone is over half an SM).
                const std::int64_t perSm = (splits * tiles + sms - 1) / sms;
                if (perSm == 2 && sms >= 78) {
                    ASSERT_LE(2 * (smem + kSkinnyStaticSmem + 1024), 228 * 1024) << where;
                }
                (splits > 1 ? splitShapes : unsplitShapes) += 1;
            }
        }
    EXPECT_GT(splitShapes, 0);
    EXPECT_GT(unsplitShapes, 0);
    // 128-row column tiles on the H200's 132 SMs: N = 4096 runs as 32 clusters of 4 splits, N = 8192 as 64 of 2,
    // N = 14336 as 112 single blocks; the same whether M is 16 or 128.
    kl::ParamValues wideColumns = spec.defaults();
    wideColumns["SBN"] = 128;
    wideColumns["SKINNY_M"] = 128;
    for (const auto& [n, expected] :
        std::vector<std::pair<std::int64_t, std::int64_t>> { { 4096, 4 }, { 8192, 2 }, { 14336, 1 } })
        for (const std::int64_t m : { 16, 128 }) {
            kl::Bindings b = kl::bindingsFor(wideColumns, { { "M", m }, { "N", n }, { "K", 8192 } });
            b[kl::kSmCountIdentifier] = 132;
            EXPECT_EQ(skinny.grid[0].evaluateInt(b), expected) << "M=" << m << " N=" << n;
        }
}

// FIT = 1, above SKINNY_M: exactly one of the two persistent kernels runs, the narrow one (BM x 64 tiles) while its
// tiles fit on the SMs (never with FIT = 2, which fits the BM x BN tiles alone); K is split at most SPLITK times (and
// into at least 8 k-blocks a split), and only while the units stay within one wave. The kernel reads its split back
// from its grid (splits_of_grid) and the reduction from its grid's y extent, so the three must agree; the workspaces
// hold that split's partials and the tiles' counters; the narrow kernel's deeper ring fits the wide one's shared
// memory. With REDUCE=2 a tile's splits are one cluster (the kernel's cluster rank is its split) and need neither
// workspace nor reduction kernel.
TEST(HopperGemmTemplate, FittedLaunchesKeepTheUnitsInOneWaveAndAgreeOnTheSplit)
{
    const kl::Problem p = kl::loadProblem(kGemm.string());
    const kl::KernelSpec spec = kl::parseKernelSpec(kl::test::readTextFile(kGemm / p.templateFor(90)), p);
    ASSERT_EQ(spec.launches.size(), 4u);
    const kl::LaunchStep& wide = spec.launches[0];
    const kl::LaunchStep& narrow = spec.launches[1];
    const kl::LaunchStep& reduce = spec.launches[2];
    ASSERT_EQ(narrow.kernel, "gemm_tma_wgmma_narrow");
    const kl::WorkspaceSpec* part = nullptr;
    const kl::WorkspaceSpec* arrivals = nullptr;
    for (const auto& w : spec.workspaces)
        (w.name == "part" ? part : arrivals) = &w;
    ASSERT_TRUE(part && arrivals && arrivals->name == "arrivals");

    std::vector<kl::ParamValues> points;
    for (const std::int64_t fit : { 1, 2 }) {
        kl::ParamValues fitted = spec.defaults();
        fitted["FIT"] = fit;
        fitted["SKINNY_M"] = 16;
        for (const auto& v : combinations(spec, fitted, { "BM", "BN", "STAGES", "SPLITK", "REDUCE", "CM" }))
            if (spec.satisfies(v, {}))
                points.push_back(v);
    }
    ASSERT_GT(points.size(), 200u);

    int narrowRuns = 0, splitRuns = 0, wideSplitRuns = 0, clusterSplitRuns = 0;
    for (const auto& shape : shapesAtThePathsEdges(p)) {
        const std::int64_t M = shape.dims.at("M"), N = shape.dims.at("N"), K = shape.dims.at("K");
        if (M <= 16)
            continue;
        for (const auto& point : points)
            for (const std::int64_t sms : { 8, 78, 132, 148 }) {
                kl::Bindings b = kl::bindingsFor(point, shape.bindings());
                b[kl::kSmCountIdentifier] = static_cast<double>(sms);
                const std::int64_t BM = point.at("BM"), BN = point.at("BN"), CM = point.at("CM");
                const std::string where = shape.label() + " SM_COUNT=" + std::to_string(sms)
                    + " BM=" + std::to_string(BM) + " BN=" + std::to_string(BN) + " CM=" + std::to_string(CM)
                    + " FIT=" + std::to_string(point.at("FIT")) + " STAGES=" + std::to_string(point.at("STAGES"))
                    + " SPLITK=" + std::to_string(point.at("SPLITK")) + " REDUCE=" + std::to_string(point.at("REDUCE"));
                const std::int64_t wideGrid = wide.grid[0].evaluateInt(b), narrowGrid = narrow.grid[0].evaluateInt(b);
                ASSERT_TRUE((wideGrid > 0) != (narrowGrid > 0)) << where;
                const std::int64_t clusters = sms / CM, mGroups = (M + BM * CM - 1) / (BM * CM);
                const bool narrowFits = point.at("FIT") == 1 && BN > 64 && mGroups * ((N + 63) / 64) <= clusters;
                ASSERT_EQ(narrowGrid > 0, narrowFits) << where;
                const std::int64_t bn = narrowGrid > 0 ? 64 : BN, grid = narrowGrid > 0 ? narrowGrid : wideGrid;
                const std::int64_t tiles = mGroups * ((N + bn - 1) / bn);
                ASSERT_EQ(grid % CM, 0) << where;
                ASSERT_LE(grid / CM, clusters) << where;
                const std::int64_t split = std::max<std::int64_t>(1, grid / CM / tiles); // splits_of_grid
                ASSERT_LE(split, point.at("SPLITK")) << where;
                const bool clusterSplit = point.at("REDUCE") == 2 && split > 1;
                const kl::LaunchStep& kernel = narrowGrid > 0 ? narrow : wide;
                const std::int64_t clusterDim = kernel.cluster[0].evaluateInt(b);
                ASSERT_EQ(clusterDim, clusterSplit ? split : CM) << where; // REDUCE=2: a tile's splits, one cluster
                if (split > 1) {
                    ASSERT_EQ(tiles * split, grid / CM) << where; // every unit of the split has its block
                    ASSERT_GE(K / 64 / split, 8) << where;
                    if (clusterSplit) {
                        ASSERT_EQ(part->bytes.evaluateInt(b), 0) << where;
                    } else {
                        ASSERT_GE(part->bytes.evaluateInt(b), split * M * N * 4) << where;
                    }
                } else {
                    ASSERT_EQ(grid / CM, std::min(tiles, clusters)) << where;
                }
                const std::int64_t reduceX = reduce.grid[0].evaluateInt(b), reduceY = reduce.grid[1].evaluateInt(b);
                if (point.at("REDUCE") == 0 && split > 1) {
                    ASSERT_EQ(reduceY, split) << where;
                    ASSERT_GE(reduceX * reduceY * 1024, M * N) << where;
                } else {
                    ASSERT_EQ(reduceX, 0) << where;
                }
                if (point.at("REDUCE") == 1) {
                    ASSERT_GE(arrivals->bytes.evaluateInt(b), ((M + BM - 1) / BM) * ((N + bn - 1) / bn) * 4) << where;
                }
                const std::int64_t stages = point.at("STAGES");
                const std::int64_t narrowStages = std::min<std::int64_t>(8, stages * (BM + BN) / (BM + 64));
                ASSERT_GE(narrowStages, stages) << where;
                if (clusterSplit) { // the partners leave their fp32 BM x bn tile in the ring, which must hold it
                    const std::int64_t ringBytes = (narrowGrid > 0 ? narrowStages : stages) * (BM + bn) * 64 * 2;
                    ASSERT_LE(BM * bn * 4, ringBytes) << where;
                }
                ASSERT_EQ(narrow.sharedBytes.evaluateInt(b), narrowStages * (BM + 64) * 128 + 1024 + 16 * narrowStages)
                    << where;
                ASSERT_LE(narrow.sharedBytes.evaluateInt(b), 232448) << where;
                const std::int64_t gridDims[3] = { grid, 1, 1 }, cluster[3] = { clusterDim, 1, 1 };
                ASSERT_EQ(kl::clusterProblem(gridDims, cluster), "") << where;
                narrowRuns += narrowGrid > 0;
                splitRuns += split > 1;
                wideSplitRuns += wideGrid > 0 && split > 1;
                clusterSplitRuns += clusterSplit;
            }
    }
    EXPECT_GT(narrowRuns, 0);
    EXPECT_GT(splitRuns, 0);
    EXPECT_GT(wideSplitRuns, 0);
    EXPECT_GT(clusterSplitRuns, 0);
    // The decode point on the H200's 132 SMs at M = 128: N = 4096 as 64 narrow tiles split in two, N = 8192 as 128
    // narrow tiles, N = 14336 as 112 of the 128-wide ones (224 narrow ones would take two waves).
    kl::ParamValues decode = spec.defaults();
    decode["FIT"] = 1;
    decode["SKINNY_M"] = 32;
    decode["BN"] = 128;
    decode["STAGES"] = 6;
    decode["SPLITK"] = 2;
    for (const auto& [n, expectNarrow, expectGrid] : std::vector<std::tuple<std::int64_t, bool, std::int64_t>> {
             { 4096, true, 128 }, { 8192, true, 128 }, { 14336, false, 112 } }) {
        kl::Bindings b = kl::bindingsFor(decode, { { "M", 128 }, { "N", n }, { "K", 4096 } });
        b[kl::kSmCountIdentifier] = 132;
        EXPECT_EQ(narrow.grid[0].evaluateInt(b), expectNarrow ? expectGrid : 0) << "N=" << n;
        EXPECT_EQ(wide.grid[0].evaluateInt(b), expectNarrow ? 0 : expectGrid) << "N=" << n;
        EXPECT_EQ(reduce.grid[1].evaluateInt(b), n == 4096 ? 2 : 1) << "N=" << n;
    }
}

TEST(CuteCandidate, CompilesForSm90aWithThePinnedCutlassHeadersAndIsCached)
{
    const std::string cutlass = kl::cutlassIncludeDir();
    ASSERT_FALSE(cutlass.empty()) << "no CUTLASS headers: scripts/install-deps unpacks the pinned nvidia-cutlass wheel "
                                     "into the build tree (or set CUTLASS_HOME)";
    EXPECT_NE(cutlass.find("cutlass-4.2.0.0"), std::string::npos) << cutlass; // the pinned release, unless CUTLASS_HOME
    const std::string src = R"(#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
// @kl:launch cute_tile_copy grid=(ceil_div(N, 64), ceil_div(M, 64)) block=(128) args=(C, A, B, M, N, K)
extern "C" __global__ void cute_tile_copy(__nv_bfloat16* C, const __nv_bfloat16* A, const __nv_bfloat16* B, int M,
                                          int N, int K)
{
    using namespace cute;
    using Wgmma = SM90_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>;
    static_assert(sizeof(typename Wgmma::CRegisters) == 32 * sizeof(float), "m64n64 keeps 32 fp32 per thread");
    Tensor gA = make_tensor(make_gmem_ptr(A), make_shape(M, K), make_stride(K, Int<1>{}));
    Tensor gC = make_tensor(make_gmem_ptr(C), make_shape(M, N), make_stride(N, Int<1>{}));
    Tensor tA = local_tile(gA, make_shape(Int<64>{}, Int<64>{}), make_coord(blockIdx.y, 0));
    Tensor tC = local_tile(gC, make_shape(Int<64>{}, Int<64>{}), make_coord(blockIdx.y, blockIdx.x));
    for (int i = threadIdx.x; i < 64 * 64; i += 128) {
        const int r = i / 64, c = i % 64;
        if (blockIdx.y * 64 + r < M && blockIdx.x * 64 + c < N && c < K)
            tC(r, c) = tA(r, c);
    }
}
)";
    const kl::Problem p = kl::loadProblem(kGemm.string());
    EXPECT_EQ(reasonsText(kl::referee::checkSource(src, p)), ""); // cute/ and cutlass/ are on the allow-list
    kl::CompileJob job;
    job.source = src;
    job.arch = "sm_90a";
    job.kernels = { "cute_tile_copy" };
    const auto cacheDir = kl::test::freshDir("test-cache-hopper");
    kl::NvrtcCompiler compiler(cacheDir, 1);
    bool includesCutlass = false;
    for (const auto& o : compiler.options(job))
        includesCutlass |= o == "-I" + cutlass;
    EXPECT_TRUE(includesCutlass);
    const auto m = compiler.compile(job);
    ASSERT_TRUE(m->report.ok) << m->report.log;
    EXPECT_FALSE(m->cubin.empty());
    EXPECT_FALSE(m->report.cacheHit);
    std::cout << "[ cute ] NVRTC compile with CuTe headers: " << m->report.compileMs << " ms\n";
    // A second compiler on the same cache directory (a later sweep, another process) does not compile again.
    kl::NvrtcCompiler again(cacheDir, 1);
    const auto cached = again.compile(job);
    EXPECT_TRUE(cached->report.cacheHit);
    EXPECT_EQ(cached->cubin, m->cubin);
}

// The sweep-rate bench's CuTe candidate (bench/hopper/cute_gemm.cu: cp.async, ldmatrix, mma.sync through CuTe's
// tiled copies and MMA) passes the referee's source rules, compiles for sm_90a at points across its space with the
// instructions it is written for, passes the PTX rules, keeps its accumulators in registers, and a second compiler
// on the same cache finds every point without compiling.
TEST(CuteGemmCandidate, CompilesAtPointsAcrossItsSpacePassesTheRefereeAndIsCached)
{
    ASSERT_FALSE(kl::cutlassIncludeDir().empty()) << "no CUTLASS headers: scripts/install-deps unpacks them";
    const kl::Problem p = kl::loadProblem(kGemm.string());
    const std::string src
        = kl::test::readTextFile(std::filesystem::path(KL_SOURCE_DIR) / "bench" / "hopper" / "cute_gemm.cu");
    const kl::KernelSpec spec = kl::parseKernelSpec(src, p);
    EXPECT_EQ(reasonsText(kl::referee::checkSource(src, p)), "");
    // Every verify and tuning shape is one the mainloop covers (K a multiple of every BK).
    for (const auto& shapes : { p.verifyShapes, p.tuningShapes })
        for (const auto& s : shapes)
            for (const auto& point : spec.enumerateSpace()) {
                std::string why;
                ASSERT_TRUE(spec.satisfies(point, s.bindings(), &why)) << s.label() << ": " << why;
            }
    // Points whose shared memory would pass the opt-in limit, or whose accumulators would not fit the registers
    // of a block's threads, are not in the space.
    EXPECT_GE(spec.spaceSize(), 40u);
    for (const auto& point : spec.enumerateSpace()) {
        EXPECT_LE(point.at("STAGES") * (point.at("BM") + point.at("BN")) * point.at("BK") * 2, 232448);
        EXPECT_LE(point.at("BM") * point.at("BN") / (point.at("WM") * point.at("WN") * 32), 128);
    }

    // Two points: a CuTe compile takes 35-40 s of CPU (template instantiation, not the headers).
    const std::vector<kl::ParamValues> points = {
        spec.defaults(),
        { { "BM", 128 }, { "BN", 256 }, { "BK", 32 }, { "STAGES", 3 }, { "WM", 2 }, { "WN", 4 } },
    };
    const auto cacheDir = kl::test::freshDir("test-cache-cute-gemm");
    std::vector<kl::CompileJob> jobs;
    {
        kl::NvrtcCompiler compiler(cacheDir, 2);
        std::vector<std::future<std::shared_ptr<const kl::CompiledModule>>> modules;
        for (const auto& point : points) {
            spec.requireValidParams(point);
            kl::CompileJob job;
            job.source = src;
            job.params = point;
            job.arch = "sm_90a";
            job.kernels = { spec.launches.at(0).kernel };
            jobs.push_back(job);
            modules.push_back(compiler.submit(job));
        }
        for (std::size_t i = 0; i < modules.size(); ++i) {
            const auto m = modules[i].get();
            ASSERT_TRUE(m->report.ok) << "point " << i << ":\n" << m->report.log;
            EXPECT_FALSE(m->report.cacheHit);
            EXPECT_FALSE(m->cubin.empty());
            for (const char* instruction : { "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                     "cp.async.cg.shared.global", "ldmatrix.sync.aligned.x4.m8n8.shared.b16", "cp.async.wait" })
                EXPECT_NE(m->ptx.find(instruction), std::string::npos) << "point " << i << " lacks " << instruction;
            for (const auto& k : m->report.kernels) {
                EXPECT_EQ(k.spillStores, 0) << "point " << i << " " << k.kernel << "\n" << m->report.log;
                EXPECT_EQ(k.localBytes, 0) << "point " << i << " " << k.kernel;
            }
            EXPECT_EQ(reasonsText(kl::referee::checkPtx(m->ptx, p)), "") << "point " << i;
            std::cout << "[ cute ] gemm point " << i << " compile " << m->report.compileMs << " ms\n";
        }
        EXPECT_EQ(compiler.compiles(), points.size());
    }
    kl::NvrtcCompiler again(cacheDir, 1);
    for (const auto& job : jobs)
        EXPECT_TRUE(again.compile(job)->report.cacheHit);
    EXPECT_EQ(again.compiles(), 0u);
}
