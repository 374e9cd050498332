// dsa_indexer's sm_90a template (TMA pages into an mbarrier ring, wgmma with the tokens as M and the query rows'
// heads as N, one equal range of pages per CTA of a persistent grid): it seeds sessions on sm_90a only (Blackwell
// keeps the portable mma.sync template: no wgmma there), passes the referee, fits an H200 at every point of its space
// and every shape the harness runs, compiles for sm_90a without spills at every point with the instructions its
// design rests on, and its grid, block and shared memory agree with the kernel's partition and layout at every
// shape and SM count. The GPU side is tests/kernels/test_hopper_gpu.cpp (DsaIndexerSm90Gpu).
#include "core/kernel_spec.h"
#include "core/loop_device_limits.h"
#include "kernels/referee/referee.h"
#include "tests/kernels/tensor_core_compile_check.h"

#include <filesystem>
#include <gtest/gtest.h>

namespace {

const std::filesystem::path kProblem = std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems" / "dsa_indexer";

using kl::test::deviceModel;
using kl::test::harnessShapes;
using kl::test::violation;

class DsaIndexerSm90 : public ::testing::Test, protected kl::test::CandidateFile {
protected:
    void SetUp() override { load(kProblem, kProblem / "template_sm90.cu"); }
};

} // namespace

TEST_F(DsaIndexerSm90, SeedsOnSm90aOnlyAndPassesTheRefereeAndFitsAnH200AtEveryShapeAcrossItsSpace)
{
    EXPECT_EQ(problem.templateFor(90), "template_sm90.cu");
    for (const int arch : { 80, 89, 100, 120 })
        EXPECT_EQ(problem.templateFor(arch), "template.cu") << arch;
    for (const auto& r : kl::referee::checkSource(source, problem))
        ADD_FAILURE() << r.rule << " line " << r.line << ": " << r.message;
    const auto shapes = harnessShapes(problem);
    const auto space = spec.enumerateSpace();
    // STAGES a multiple of CONSUMERS: 6 rings for one consumer, 4 for two, 3 for three; each with and without the
    // L2 hint.
    EXPECT_EQ(space.size(), (6u + 4 + 3) * 2);
    for (const auto& point : space)
        EXPECT_EQ(violation(kl::checkDeviceLimits(spec, point, shapes, deviceModel(9, 0, 227))), "")
            << "STAGES=" << point.at("STAGES") << " CONSUMERS=" << point.at("CONSUMERS");
    // wgmma exists on sm_90a alone: the tuner never proposes the template elsewhere.
    for (const auto& [major, optin] : { std::pair { 8, 163 }, std::pair { 10, 227 } })
        EXPECT_EQ(
            violation(kl::checkDeviceLimits(spec, spec.defaults(), shapes, deviceModel(major, 0, optin))).substr(0, 11),
            "device.arch")
            << major;
}

// Every point of the space (26 raw-PTX compiles, about a third of a second each).
TEST_F(DsaIndexerSm90, CompilesForSm90aWithoutSpillsAtEveryPointOnTmaAndWgmma)
{
    const auto points = spec.enumerateSpace();
    const auto modules = kl::test::compilePoints(source, spec, points, { "sm_90a" });
    kl::test::expectModulesWithoutSpills(modules, spec, problem);
    ASSERT_EQ(modules.size(), points.size());
    for (std::size_t i = 0; i < modules.size(); ++i) {
        const std::string& ptx = modules[i].second->ptx;
        for (const char* instruction : { "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes",
                 "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes",
                 "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes", "mbarrier.try_wait.parity",
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "prefetch.tensormap" })
            EXPECT_NE(ptx.find(instruction), std::string::npos) << modules[i].first << " lacks " << instruction;
        EXPECT_EQ(ptx.find("createpolicy.fractional.L2::evict_first") != std::string::npos, points[i].at("EVICT") == 1)
            << modules[i].first;
    }
}

// At every point, harness shape and SM count: the grid is 1 .. SM_COUNT CTAs and at most one per page, so each CTA's
// range c * pages / grid .. (c + 1) * pages / grid holds a page, and that product stays in the kernel's 32 bits; a
// block is the consumers' warpgroups and the producer warp; the shared memory holds the ring, two query slots of
// SQ x 64 rows (both 64-dim chunks) and weights, each 1024-byte aligned, and the alignment of the base.
TEST_F(DsaIndexerSm90, GridBlockAndSharedMemoryAgreeWithTheKernelAtEveryShapeAndSmCount)
{
    ASSERT_EQ(spec.launches.size(), 1u);
    ASSERT_EQ(spec.tensorMaps.size(), 2u);
    bool pagesBounded = false;
    for (const auto& c : problem.dimConstraints)
        pagesBounded |= c.text() == "B * MAXP * PS <= 4194304";
    ASSERT_TRUE(pagesBounded) << "the 32-bit partition math assumes at most 2^16 pages a batch";
    const auto& launch = spec.launches[0];
    int capped = 0, perPage = 0;
    for (const auto& point : spec.enumerateSpace())
        for (const auto& shape : harnessShapes(problem))
            for (const std::int64_t sms : { 1, 108, 132, 148, 4096 }) {
                kl::Bindings b = kl::bindingsFor(point, shape.bindings());
                b[kl::kSmCountIdentifier] = sms;
                const std::string where = shape.label() + " SM_COUNT=" + std::to_string(sms);
                const std::int64_t pages = b.at("B") * b.at("MAXP"), ctas = launch.grid[0].evaluateInt(b);
                ASSERT_GE(ctas, 1) << where;
                ASSERT_LE(ctas, std::min(sms, pages)) << where;
                ASSERT_LT(ctas * pages, std::int64_t { 1 } << 32) << where;
                capped += ctas == sms;
                perPage += ctas == pages;
                EXPECT_EQ(launch.block[0].evaluateInt(b), point.at("CONSUMERS") * 128 + 32) << where;
                const std::int64_t querySlot = b.at("SQ") * (64 * 128 * 2 + 64 * 4);
                EXPECT_GE(launch.sharedBytes.evaluateInt(b),
                    1023 + point.at("STAGES") * 64 * 128 * 2 + 2 * ((querySlot + 1023) / 1024 * 1024))
                    << where;
            }
    EXPECT_GT(capped, 0);
    EXPECT_GT(perPage, 0);
}
