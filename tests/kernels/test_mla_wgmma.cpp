// DeepSeek MLA decode on Hopper's warpgroup MMA: mla_decode's wgmma candidate (bench/attention/mla_hypothesis/
// shared_kv_wgmma.cu: TMA pages) and sparse_mla_decode's sm_90a template (kernels/problems/sparse_mla_decode/
// template_sm90.cu: cp.async gathers). Both parse against their problem and pass the referee's rules, fit an H200 at
// every shape the harness runs (384 threads, the Q tile and two KV buffers in 218 KB, the sparse list on top) and no
// other arch, compile for sm_90a without spills into wgmma with registers moved from the producer to the consumers,
// declare a tensor map the encoder accepts at every shape (dense), and keep every split grid within the workspace,
// which cannot name the SM count. The GPU side is bench/attention/mla_wgmma/gpu-run.sh.
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/loop_device_limits.h"
#include "core/tensor_map.h"
#include "kernels/referee/referee.h"
#include "kernels/shape_sampler.h"
#include "tests/kernels/tensor_core_compile_check.h"
#include "tests/support/text_file.h"

#include <filesystem>
#include <gtest/gtest.h>

namespace {

const std::filesystem::path kRoot = KL_SOURCE_DIR;
const std::filesystem::path kProblems = kRoot / "kernels" / "problems";

struct WgmmaKernel {
    const char* problem;
    std::filesystem::path source;
    std::int64_t sharedBytes; // 1 KB alignment slack, Q and two KV buffers of 72 KB, 1 KB control (+ the 8 KB list)
    std::vector<const char*> loads; // the PTX its producer uses
    std::size_t spaceSize;
};

const WgmmaKernel kDense { "mla_decode", kRoot / "bench" / "attention" / "mla_hypothesis" / "shared_kv_wgmma.cu",
    1024 + 3 * 73728 + 1024, { "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes" },
    4 }; // WAVES 1..4
const WgmmaKernel kSparse { "sparse_mla_decode", kProblems / "sparse_mla_decode" / "template_sm90.cu",
    1024 + 3 * 73728 + 1024 + 2048 * 4, { "cp.async.cg.shared.global", "cp.async.mbarrier.arrive.noinc" },
    4 * 3 }; // WAVES x L2FETCH

void PrintTo(const WgmmaKernel& k, std::ostream* os)
{
    *os << k.source.filename().string();
}

using kl::test::deviceModel;
using kl::test::harnessShapes;
using kl::test::violation;

class MlaWgmma : public ::testing::TestWithParam<WgmmaKernel>, protected kl::test::CandidateFile {
protected:
    void SetUp() override { load(kProblems / GetParam().problem, GetParam().source); }
};

} // namespace

TEST_P(MlaWgmma, PassesTheRefereeAndFitsAnH200AtEveryShapeAcrossItsSpace)
{
    for (const auto& r : kl::referee::checkSource(source, problem))
        ADD_FAILURE() << r.rule << " line " << r.line << ": " << r.message;
    const kl::DeviceInfo h200 = deviceModel(9, 0, 227);
    const auto shapes = harnessShapes(problem);
    const auto space = spec.enumerateSpace();
    EXPECT_EQ(space.size(), GetParam().spaceSize);
    for (const auto& point : space) {
        std::string where;
        for (const auto& [name, value] : point)
            where += name + "=" + std::to_string(value) + " ";
        EXPECT_EQ(violation(kl::checkDeviceLimits(spec, point, shapes, h200)), "") << where;
    }
    // The shared memory the launch line asks for is the kernel's plan, within the 227 KB opt-in.
    const kl::Bindings b = kl::bindingsFor(spec.defaults(), shapes.front().bindings());
    EXPECT_EQ(spec.launches[0].sharedBytes.evaluateInt(b), GetParam().sharedBytes);
    EXPECT_LE(GetParam().sharedBytes, 227 * 1024);
    EXPECT_EQ(spec.launches[0].block[0].evaluateInt(b), 384);
    // wgmma and setmaxnreg are sm_90a's: neither older architectures nor Blackwell have them.
    for (const auto& other :
        { deviceModel(8, 0, 163), deviceModel(8, 9, 99), deviceModel(7, 5, 64), deviceModel(10, 0, 227) })
        EXPECT_EQ(violation(kl::checkDeviceLimits(spec, spec.defaults(), shapes, other)).substr(0, 11), "device.arch")
            << other.arch;
}

TEST_P(MlaWgmma, CompilesForSm90aWithoutSpillsIntoWgmmaWithRegistersMovedToTheConsumers)
{
    // The defaults, and each L2 fetch size of the sparse kernel's gather (the PTX carries the hint it names).
    std::vector<kl::ParamValues> points { spec.defaults() };
    if (const auto* fetch = spec.param("L2FETCH"))
        for (const std::int64_t bytes : fetch->values)
            if (bytes != spec.defaults().at("L2FETCH")) {
                points.push_back(spec.defaults());
                points.back()["L2FETCH"] = bytes;
            }
    const auto modules = kl::test::compilePoints(source, spec, points, { "sm_90a" });
    ASSERT_EQ(modules.size(), points.size());
    kl::test::expectModulesWithoutSpills(modules, spec, problem);
    for (std::size_t i = 0; i < points.size(); ++i)
        if (points[i].count("L2FETCH")) {
            const std::int64_t bytes = points[i].at("L2FETCH");
            const bool hinted
                = modules[i].second->ptx.find(".L2::" + std::to_string(bytes) + "B [") != std::string::npos;
            EXPECT_EQ(hinted, bytes > 0) << modules[i].first;
            if (bytes == 0) {
                EXPECT_EQ(modules[i].second->ptx.find("cp.async.cg.shared.global.L2::"), std::string::npos);
            }
        }
    for (const auto& [where, m] : modules) {
        // 384 threads at one block per SM: the launch bounds cap every thread at 168 registers, and the consumers'
        // 64 x 256 fp32 accumulators need the 232 the producer's setmaxnreg.dec to 40 frees.
        for (const auto& k : m->report.kernels) {
            if (k.kernel == spec.launches[0].kernel) {
                EXPECT_EQ(k.registers, 168) << where;
            }
        }
        std::vector<const char*> instructions = { "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "setmaxnreg.dec.sync.aligned.u32 40",
            "setmaxnreg.inc.sync.aligned.u32 232", "mbarrier.try_wait.parity.shared::cta.b64",
            "fence.proxy.async.shared::cta" };
        instructions.insert(instructions.end(), GetParam().loads.begin(), GetParam().loads.end());
        for (const char* instruction : instructions)
            EXPECT_NE(m->ptx.find(instruction), std::string::npos) << where << " lacks " << instruction;
    }
}

// The dense kernel's map over kv_cache (576 x 64 x pages, boxes of 64 x 64 in the 128-byte swizzle) is one the
// encoder takes at every shape the harness runs.
TEST_P(MlaWgmma, TensorMapsResolveAtEveryShape)
{
    ASSERT_EQ(spec.tensorMaps.size(), std::string(GetParam().problem) == "mla_decode" ? 1u : 0u);
    for (const auto& map : spec.tensorMaps)
        for (const auto& shape : harnessShapes(problem)) {
            const kl::TensorMapGeometry g
                = kl::resolveTensorMap(map, problem, kl::bindingsFor(spec.defaults(), shape.bindings()));
            EXPECT_EQ(g.rank, 3) << shape.label();
            EXPECT_EQ(g.boxBytes(), 64u * 64 * 2) << shape.label();
            EXPECT_EQ(
                g.globalDim[2], static_cast<std::uint64_t>(shape.bindings().at("B") * shape.bindings().at("MAXP")))
                << shape.label();
        }
}

// Splits come from the SM count: at every point, shape and SM count the split grid is 1..min(64, blocks of 64
// tokens), within the workspace; the merge is launched only with more than one split, and a machine-sized batch gets
// one split.
TEST_P(MlaWgmma, SplitGridFitsTheWorkspaceAtEveryShapeAndSmCount)
{
    kl::test::expectMlaSplitGridFitsTheWorkspace(
        problem, spec, [](const kl::ParamValues&) { return std::int64_t { 64 }; });
}

INSTANTIATE_TEST_SUITE_P(
    MlaDecode, MlaWgmma, ::testing::Values(kDense, kSparse), [](const ::testing::TestParamInfo<WgmmaKernel>& p) {
        return std::string(p.param.problem) == "mla_decode" ? "DenseTma" : "SparseGather";
    });
