// DeepSeek MLA decode on tensor cores (mma.sync bf16, ldmatrix, cp.async): mla_decode's shared-KV candidate (the
// engineer's hypothesis, bench/attention/mla_hypothesis/shared_kv.cu) and sparse_mla_decode's sm_100 template. Both
// parse against their problem and pass the referee's rules, fit an H200 at every shape the harness runs, compile for
// sm_80 and sm_90a across their tile sizes without spills (the 32 x 128 O accumulators live in registers), and keep
// every split grid within the workspace, which cannot name the SM count. The sparse template seeds sessions on
// sm_100 (its 72 KB Q tile and two stages of 64 rows need 226 KB of shared memory; sm_90a takes the wgmma one).
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/loop_device_limits.h"
#include "kernels/referee/referee.h"
#include "kernels/shape_sampler.h"
#include "tests/kernels/tensor_core_compile_check.h"
#include "tests/support/text_file.h"

#include <filesystem>
#include <gtest/gtest.h>

namespace {

const std::filesystem::path kRoot = KL_SOURCE_DIR;
const std::filesystem::path kProblems = kRoot / "kernels" / "problems";

struct MlaKernel {
    const char* problem;
    std::filesystem::path source;
};

const MlaKernel kDense { "mla_decode", kRoot / "bench" / "attention" / "mla_hypothesis" / "shared_kv.cu" };
const MlaKernel kSparse { "sparse_mla_decode", kProblems / "sparse_mla_decode" / "template_mma_sync.cu" };

using kl::test::deviceModel;
using kl::test::harnessShapes;
using kl::test::violation;

class MlaTensorCores : public ::testing::TestWithParam<MlaKernel>, protected kl::test::CandidateFile {
protected:
    void SetUp() override { load(kProblems / GetParam().problem, GetParam().source); }
};

} // namespace

TEST_P(MlaTensorCores, PassesTheRefereeAndFitsAnH200AtEveryShapeAcrossItsSpace)
{
    for (const auto& r : kl::referee::checkSource(source, problem))
        ADD_FAILURE() << r.rule << " line " << r.line << ": " << r.message;
    const kl::DeviceInfo h200 = deviceModel(9, 0, 227);
    const auto shapes = harnessShapes(problem);
    EXPECT_EQ(violation(kl::checkDeviceLimits(spec, spec.defaults(), shapes, h200)), "");
    const auto space = spec.enumerateSpace();
    std::size_t fits = 0;
    for (const auto& point : space)
        fits += !kl::checkDeviceLimits(spec, point, shapes, h200).has_value();
    // On 227 KB BN 64 takes two stages and BN 32 two to four, at each of the 4 WAVES.
    EXPECT_EQ(fits, 16u);
    EXPECT_EQ(violation(kl::checkDeviceLimits(spec, spec.defaults(), shapes, deviceModel(7, 5, 64))).substr(0, 11),
        "device.arch");
}

TEST_P(MlaTensorCores, CompilesForSm80AndSm90aWithoutSpills)
{
    const std::vector<kl::ParamValues> points = { spec.defaults(), { { "BN", 64 }, { "STAGES", 2 }, { "WAVES", 4 } },
        { { "BN", 32 }, { "STAGES", 4 }, { "WAVES", 2 } } };
    kl::test::expectTensorCoreModulesWithoutSpills(source, spec, problem, points);
}

// Splits come from the SM count: at every point, shape and SM count the split grid is 1..min(64, tiles), within the
// workspace; the merge is launched only with more than one split, and a machine-sized batch gets one split.
TEST_P(MlaTensorCores, SplitGridFitsTheWorkspaceAtEveryShapeAndSmCount)
{
    kl::test::expectMlaSplitGridFitsTheWorkspace(
        problem, spec, [](const kl::ParamValues& point) { return point.at("BN"); });
}

INSTANTIATE_TEST_SUITE_P(
    MlaDecode, MlaTensorCores, ::testing::Values(kDense, kSparse), [](const ::testing::TestParamInfo<MlaKernel>& p) {
        return std::string(p.param.problem) == "mla_decode" ? "SharedKvCandidate" : "SparseTemplateSm80";
    });

// Where the sparse mma.sync template seeds a session: sm_100 (227 KB a block, no wgmma), where its defaults (BN 64, two
// stages) fit; sm_90a takes the wgmma template; sm_80 (163 KB) would take only BN 32, sm_86 / sm_89 / sm_120 (99 KB)
// nothing: those keep the portable template.
TEST(SparseMlaTensorCores, ChosenForSm100WhereTheSharedMemoryHoldsQAndTwoStagesButNoWgmma)
{
    const kl::Problem p = kl::loadProblem((kProblems / "sparse_mla_decode").string());
    for (const int arch : { 75, 80, 86, 89, 120 })
        EXPECT_EQ(p.templateFor(arch), "template.cu") << arch;
    EXPECT_EQ(p.templateFor(90), "template_sm90.cu");
    EXPECT_EQ(p.templateFor(100), "template_mma_sync.cu");
    const kl::KernelSpec spec = kl::parseKernelSpec(kl::test::readTextFile(kSparse.source), p);
    const auto shapes = kl::shapesOf(p);
    const kl::DeviceInfo ampere = deviceModel(8, 0, 163);
    EXPECT_EQ(violation(kl::checkDeviceLimits(spec, spec.defaults(), shapes, ampere)).substr(0, 11), "device.arch");
    EXPECT_EQ(
        violation(kl::checkDeviceLimits(spec, { { "BN", 32 }, { "STAGES", 2 }, { "WAVES", 1 } }, shapes, ampere)), "");
    EXPECT_EQ(violation(kl::checkDeviceLimits(
                            spec, { { "BN", 32 }, { "STAGES", 2 }, { "WAVES", 1 } }, shapes, deviceModel(8, 6, 99)))
                  .substr(0, 11),
        "device.arch");
}
