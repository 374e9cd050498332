// decode_attention's sm_90 template (bulk copies of whole token rows into an mbarrier ring, one consumer warp per KV
// head on mma.sync, the batch's tokens cut into one equal range per SM, a PDL-launched merge): it seeds sessions on
// sm_90 and sm_100, passes the referee, fits an H200 at every shape the harness runs at every point of its space,
// compiles for sm_90a without spills with the instructions its design rests on, and its grids and workspace agree at
// every shape and SM count: one CTA per SM (fewer for small batches), the merge launched exactly when there is more
// than one CTA, and two partial slots per CTA within the workspace, which cannot name the SM count. The partition
// itself (every token once, the merge reading the slots the split kernel wrote) is checked on the CPU by
// bench/attention/decode_sm90_driver.cu --partition-only; the GPU side is tests/kernels/test_hopper_gpu.cpp.
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/loop_device_limits.h"
#include "kernels/referee/referee.h"
#include "tests/kernels/tensor_core_compile_check.h"
#include "tests/support/text_file.h"

#include <algorithm>
#include <filesystem>
#include <gtest/gtest.h>

namespace {

const std::filesystem::path kProblem
    = std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems" / "decode_attention";

using kl::test::deviceModel;
using kl::test::harnessShapes;
using kl::test::violation;

class DecodeAttentionSm90 : public ::testing::Test, protected kl::test::CandidateFile {
protected:
    void SetUp() override { load(kProblem, kProblem / "template_sm90.cu"); }
};

} // namespace

TEST_F(DecodeAttentionSm90, SeedsFromSm90AndPassesTheRefereeAndFitsAnH200AtEveryShapeAcrossItsSpace)
{
    for (const int arch : { 90, 100 })
        EXPECT_EQ(problem.templateFor(arch), "template_sm90.cu") << arch;
    for (const auto& r : kl::referee::checkSource(source, problem))
        ADD_FAILURE() << r.rule << " line " << r.line << ": " << r.message;
    const kl::DeviceInfo h200 = deviceModel(9, 0, 227);
    const auto shapes = harnessShapes(problem);
    const auto space = spec.enumerateSpace();
    // TT 8 with 2 .. 6 stages and TT 16 with 2 or 3 (a stage of 16 rows of K and V is 66 KB), at each MINTOK and EVICT,
    // with a merge kernel or without (FUSE); by sequence (MINTOK idle) with every ring, and in clusters of 2, 4, 7 or 8
    // with the rings that hold 128 heads' pieces; each with O rescaled at every tile or only when a row's maximum grows
    // (LAZY).
    EXPECT_EQ(space.size(), (7u * 5 * 2 * 2 + 7 * 2 + 4 * 6 * 2) * 2);
    for (const auto& point : space)
        EXPECT_EQ(violation(kl::checkDeviceLimits(spec, point, shapes, h200)), "")
            << "TT=" << point.at("TT") << " STAGES=" << point.at("STAGES");
    // Below sm_90 (no bulk copies into mbarriers, no griddepcontrol) the tuner never proposes it.
    EXPECT_EQ(violation(kl::checkDeviceLimits(spec, spec.defaults(), shapes, deviceModel(8, 0, 163))).substr(0, 11),
        "device.arch");
}

// The defaults, the deepest ring of small stages without the L2 hint, the shallowest ring of large stages with the
// fewest CTAs for small batches, and a small ring of small stages; by sequence, alone and in clusters of 8 and 2; and
// the deepest ring of large stages, where the registers are tightest (the launch bounds leave 168 a thread), whole and
// by sequence with LAZY (nvcc 13 spills 24 bytes at the first, and 4 without LAZY at the second; the harness's NVRTC
// must not).
// TT = 8 takes P . V with m16n8k8; the clusters combine their pieces over distributed shared memory; LAZY votes on
// whether any row's maximum grew before rescaling O; without the merge kernel (FUSE), at the defaults and where the
// registers are tightest, a sequence's pieces are counted on its arrival counter by an atomic add, and the last CTA
// copies them into its drained ring with cp.async.
TEST_F(DecodeAttentionSm90, CompilesForSm90aWithoutSpillsOnBulkCopiesAndTensorCores)
{
    const std::vector<kl::ParamValues> points
        = { spec.defaults(), { { "TT", 8 }, { "STAGES", 6 }, { "MINTOK", 16 }, { "EVICT", 0 } },
              { { "TT", 16 }, { "STAGES", 2 }, { "MINTOK", 256 }, { "EVICT", 1 } },
              { { "TT", 8 }, { "STAGES", 2 }, { "MINTOK", 128 }, { "EVICT", 1 } },
              { { "TT", 8 }, { "STAGES", 6 }, { "MINTOK", 32 }, { "EVICT", 1 }, { "SEQ", 1 } },
              { { "TT", 8 }, { "STAGES", 6 }, { "MINTOK", 32 }, { "EVICT", 1 }, { "SEQ", 8 }, { "LAZY", 1 } },
              { { "TT", 16 }, { "STAGES", 2 }, { "MINTOK", 32 }, { "EVICT", 0 }, { "SEQ", 2 } },
              { { "TT", 16 }, { "STAGES", 3 }, { "MINTOK", 32 }, { "EVICT", 1 } },
              { { "TT", 16 }, { "STAGES", 3 }, { "MINTOK", 32 }, { "EVICT", 1 }, { "SEQ", 1 }, { "LAZY", 1 } },
              { { "TT", 8 }, { "STAGES", 6 }, { "MINTOK", 32 }, { "EVICT", 1 }, { "FUSE", 1 } },
              { { "TT", 16 }, { "STAGES", 3 }, { "MINTOK", 32 }, { "EVICT", 1 }, { "LAZY", 1 }, { "FUSE", 1 } } };
    const auto modules = kl::test::compilePoints(source, spec, points, { "sm_90a" });
    kl::test::expectModulesWithoutSpills(modules, spec, problem);
    ASSERT_EQ(modules.size(), points.size());
    for (std::size_t i = 0; i < modules.size(); ++i) {
        const std::string& ptx = modules[i].second->ptx;
        for (const char* instruction : { "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
                 "mbarrier.try_wait.parity", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                 "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "griddepcontrol.wait" })
            EXPECT_NE(ptx.find(instruction), std::string::npos) << modules[i].first << " lacks " << instruction;
        const std::int64_t seq = points[i].count("SEQ") ? points[i].at("SEQ") : 0;
        EXPECT_EQ(ptx.find("griddepcontrol.launch_dependents") != std::string::npos, seq == 0) << modules[i].first;
        for (const char* instruction : { "barrier.cluster.arrive.release", "mapa.shared::cluster.u32",
                 "ld.shared::cluster.v4.f32", "bar.sync 1, 256" })
            EXPECT_EQ(ptx.find(instruction) != std::string::npos, seq > 1) << modules[i].first << " " << instruction;
        const bool lazy = points[i].count("LAZY") && points[i].at("LAZY") == 1;
        const bool fused = points[i].count("FUSE") && points[i].at("FUSE") == 1;
        for (const char* instruction : { "atom.global.add.u32", "cp.async.cg.shared.global" })
            EXPECT_EQ(ptx.find(instruction) != std::string::npos, fused) << modules[i].first << " " << instruction;
        EXPECT_EQ(ptx.find("vote.sync.any.pred") != std::string::npos, lazy) << modules[i].first;
        const bool small = points[i].at("TT") == 8, hint = points[i].at("EVICT") == 1;
        EXPECT_EQ(ptx.find("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32") != std::string::npos, small)
            << modules[i].first;
        EXPECT_EQ(ptx.find("createpolicy.fractional.L2::evict_first") != std::string::npos, hint) << modules[i].first;
    }
}

// At every point, shape and SM count: the split grid is 1 .. min(SM count, 256) CTAs, one per MINTOK tokens at most;
// the workspace holds the header and two slots of HQ x (D + 2) floats per CTA; the merge is launched exactly when
// there is more than one CTA and no FUSE (then a zeroed counter a sequence); the shared memory holds the ring and the
// header. By sequence (SEQ > 0): B x P CTAs in clusters of P = min(SEQ, SM count / B) (at least 1), no merge, no
// workspace to speak of, and a cluster's ring holds (acc, m, l) of every query head. A batch of 16 sequences of 4096
// tokens fills all 132 SMs of an H200 (the sm_80 template's grid was 256 CTAs of 96 KB, two on 124 SMs and one on 8).
TEST_F(DecodeAttentionSm90, GridsFitTheWorkspaceAtEveryShapeAndSmCount)
{
    ASSERT_EQ(spec.launches.size(), 2u);
    ASSERT_EQ(spec.workspaces.size(), 2u);
    EXPECT_FALSE(spec.workspaces[0].zeroInit); // partials: poisoned, so a slot read before it is written fails
    EXPECT_TRUE(spec.workspaces[1].zeroInit); // FUSE's arrival counters, which every launch leaves at zero
    EXPECT_TRUE(spec.launches[1].programmaticLaunch);
    const auto shapes = harnessShapes(problem);
    int merged = 0, fusedMerges = 0, single = 0;
    for (const auto& point : spec.enumerateSpace())
        for (const auto& shape : shapes)
            for (const std::int64_t sms : { 1, 108, 132, 148, 4096 }) {
                kl::Bindings b = kl::bindingsFor(point, shape.bindings());
                const std::int64_t B = b.at("B"), HQ = b.at("HQ"), tokens = b.at("B") * b.at("MAXP") * b.at("PS");
                const std::int64_t workspace = spec.workspaces[0].bytes.evaluateInt(b);
                const bool fused = point.at("FUSE") == 1;
                EXPECT_EQ(spec.workspaces[1].bytes.evaluateInt(b), fused ? 4 * B : 0); // a counter a sequence
                // The partition's index math is 32-bit: c x total and (g + 1) x C stay below 2^32 for 256 CTAs.
                ASSERT_LT(256 * tokens, std::int64_t { 1 } << 32);
                b[kl::kSmCountIdentifier] = sms;
                const std::string where = shape.label() + " SM_COUNT=" + std::to_string(sms);
                const std::int64_t ctas = spec.launches[0].grid[0].evaluateInt(b), seq = point.at("SEQ");
                const std::int64_t ring = point.at("STAGES") * point.at("TT") * 2 * (2048 + 16);
                EXPECT_GE(
                    spec.launches[0].sharedBytes.evaluateInt(b), ring + 4 * (B + 1) + 16 * point.at("STAGES") + 32)
                    << where;
                // SEQ > 0: P CTAs a sequence, as many as SEQ where the SMs hold that many for every sequence.
                const std::int64_t P = seq > 0 ? std::max<std::int64_t>(1, std::min(seq, sms / B)) : 1;
                EXPECT_EQ(spec.launches[0].cluster[0].evaluateInt(b), P) << where;
                EXPECT_EQ(spec.launches[0].block[0].evaluateInt(b), 288) << where;
                if (seq > 0) {
                    EXPECT_EQ(ctas, B * P) << where;
                    EXPECT_EQ(workspace, 16) << where; // no partials go through global memory
                    EXPECT_EQ(spec.launches[1].grid[0].evaluateInt(b), 0) << where;
                    if (seq > 1) {
                        EXPECT_GE(ring, HQ * (128 * 4 + 8)) << where;
                    }
                    continue;
                }
                ASSERT_GE(ctas, 1) << where;
                ASSERT_LE(ctas, std::min<std::int64_t>(sms, 256)) << where;
                ASSERT_LE(ctas, (tokens + point.at("MINTOK") - 1) / point.at("MINTOK")) << where;
                const std::int64_t header = 16 * ((B + 4) / 4 + 1);
                ASSERT_GE(workspace, header + 2 * ctas * HQ * (128 + 2) * 4) << where;
                // W warps a (sequence, query head): enough for every piece of a sequence (at most ctas / B + 1)
                // at 8 a warp, at most 8; a block of 8 warps takes 8 / W heads of one sequence.
                std::int64_t W = 1;
                while (W < 8 && W * 8 < (ctas + B - 1) / B + 1)
                    W *= 2;
                ASSERT_EQ(HQ % (8 / W), 0) << where;
                EXPECT_EQ(spec.launches[1].grid[0].evaluateInt(b), ctas > 1 && !fused ? B * HQ * W / 8 : 0) << where;
                EXPECT_EQ(spec.launches[1].block[0].evaluateInt(b), 256) << where;
                merged += ctas > 1 && !fused;
                fusedMerges += ctas > 1 && fused;
                single += ctas == 1;
            }
    EXPECT_GT(merged, 0);
    EXPECT_GT(fusedMerges, 0);
    EXPECT_GT(single, 0);
    // ... and at every shape the problem admits, not only those the harness runs.
    bool tokensBounded = false;
    for (const auto& c : problem.dimConstraints)
        tokensBounded |= c.text() == "B * MAXP * PS <= 1048576";
    EXPECT_TRUE(tokensBounded) << "the 32-bit partition math assumes at most 2^20 tokens a batch";
    kl::Bindings b = kl::bindingsFor(spec.defaults(), problem.withConstants(problem.tuningShapes[1]).bindings());
    ASSERT_EQ(b.at("B"), 16);
    b[kl::kSmCountIdentifier] = 132;
    EXPECT_EQ(spec.launches[0].grid[0].evaluateInt(b), 132);
}
