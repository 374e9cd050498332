// Physics rules on synthetic evaluations: impossible times reject, big or lopsided wins go to review.
#include "core/current_best.h"
#include "kernels/referee/referee.h"

#include <algorithm>
#include <gtest/gtest.h>

namespace {

using kl::referee::checkPhysics;
using kl::referee::PhysicsSettings;

kl::Problem rmsnorm()
{
    kl::Problem p;
    p.name = "rmsnorm";
    p.dims = { { "T", 1, 65536, 1, true }, { "H", 1024, 16384, 8, true } };
    p.bytes = kl::Expr::parse("2*(2*T*H + H)");
    p.flops = kl::Expr::parse("4*T*H");
    return p;
}

kl::DeviceInfo h200()
{
    kl::DeviceInfo d;
    d.name = "H200";
    d.l2Bytes = 60ll << 20;
    d.measuredCopyBandwidth = 4.0e12;
    return d;
}

kl::ShapeResult timed(std::int64_t T, std::int64_t H, double medianUs, double speedup)
{
    kl::ShapeResult s;
    s.shape.dims = { { "T", T }, { "H", H } };
    s.correct = true;
    s.timing = kl::TimingStats {};
    s.timing->medianUs = medianUs;
    s.speedup = speedup;
    return s;
}

int count(const std::vector<kl::VerdictReason>& rs, const std::string& rule)
{
    return static_cast<int>(std::count_if(rs.begin(), rs.end(), [&](const auto& r) { return r.rule == rule; }));
}

TEST(Physics, RooflineFloorUsesMeasuredBandwidthL2CapacityAndLaunches)
{
    PhysicsSettings settings;
    settings.minKernelSeconds = 0; // the memory and compute terms alone first
    const double l2 = 60.0 * (1 << 20);
    kl::Shape big;
    big.dims = { { "T", 4096 }, { "H", 8192 } };
    const double bytes = 2.0 * (2.0 * 4096 * 8192 + 8192);
    // Only what L2 can hold is served at L2 speed; the rest streams from HBM at the measured bandwidth.
    EXPECT_DOUBLE_EQ(kl::referee::rooflineFloorSeconds(rmsnorm(), big, h200(), settings),
        ((bytes - l2) / 4.0e12 + l2 / (4.0e12 * settings.l2BandwidthFactor)) * 0.9);
    kl::Shape small; // 2 MiB: fits in L2, so the floor allows L2 bandwidth for all of it
    small.dims = { { "T", 64 }, { "H", 8192 } };
    const double smallBytes = 2.0 * (2.0 * 64 * 8192 + 8192);
    EXPECT_DOUBLE_EQ(kl::referee::rooflineFloorSeconds(rmsnorm(), small, h200(), settings),
        smallBytes / (4.0e12 * settings.l2BandwidthFactor) * 0.9);
    // Every kernel of the plan adds its launch.
    PhysicsSettings launches = settings;
    launches.minKernelSeconds = 0.5e-6;
    launches.kernelsPerCall = 2;
    EXPECT_DOUBLE_EQ(kl::referee::rooflineFloorSeconds(rmsnorm(), small, h200(), launches),
        (smallBytes / (4.0e12 * settings.l2BandwidthFactor) + 1.0e-6) * 0.9);
    PhysicsSettings compute = settings;
    compute.peakFlops = 1.0e12; // a compute floor above the memory floor wins
    EXPECT_DOUBLE_EQ(
        kl::referee::rooflineFloorSeconds(rmsnorm(), big, h200(), compute), 4.0 * 4096 * 8192 / 1.0e12 * 0.9);
    kl::DeviceInfo unmeasured = h200();
    unmeasured.measuredCopyBandwidth = 0;
    EXPECT_EQ(kl::referee::rooflineFloorSeconds(rmsnorm(), big, unmeasured, settings), 0.0);
}

TEST(Physics, ComputeFloorUsesThePerArchitectureTensorPeak)
{
    PhysicsSettings settings;
    settings.minKernelSeconds = 0;
    kl::Problem gemm = rmsnorm();
    gemm.bytes = kl::Expr::parse("2*(T*H + H*H + T*H)");
    gemm.flops = kl::Expr::parse("2*T*H*H");
    gemm.tensors = { { "C", kl::DType::BF16, {}, kl::TensorRole::Output, 1.0 } };
    kl::Shape big;
    big.dims = { { "T", 4096 }, { "H", 8192 } };
    kl::DeviceInfo hopper = h200();
    hopper.ccMajor = 9;
    hopper.smCount = 132;
    hopper.smClockMHz = 1980;
    hopper.measuredCopyBandwidth = 0; // the compute floor alone
    // bf16 on sm_90: 4096 dense FLOP/clock/SM (989 TFLOP/s at 1830 MHz): 1.07 PFLOP/s at 1980 MHz.
    EXPECT_EQ(kl::referee::tensorFlopsPerClockPerSm(gemm, hopper), 4096);
    EXPECT_DOUBLE_EQ(kl::referee::rooflineFloorSeconds(gemm, big, hopper, settings),
        2.0 * 4096 * 8192 * 8192 / (132 * 1980e6 * 4096) * 0.9);
    // fp32 tensors: tf32 at half the 16-bit rate; fp8 at twice.
    gemm.tensors[0].dtype = kl::DType::F32;
    EXPECT_EQ(kl::referee::tensorFlopsPerClockPerSm(gemm, hopper), 2048);
    gemm.tensors[0].dtype = kl::DType::FP8E4M3;
    EXPECT_EQ(kl::referee::tensorFlopsPerClockPerSm(gemm, hopper), 8192);
    // An architecture outside the table falls back to the derived, deliberately loose rate.
    kl::DeviceInfo unknown = hopper;
    unknown.ccMajor = 7;
    EXPECT_EQ(kl::referee::tensorFlopsPerClockPerSm(gemm, unknown), 0);
    EXPECT_DOUBLE_EQ(kl::referee::rooflineFloorSeconds(gemm, big, unknown, settings),
        2.0 * 4096 * 8192 * 8192 / (132 * 1980e6 * settings.flopsPerClockPerSm) * 0.9);
    // A measured peak wins over the table.
    settings.peakFlops = 7.0e14;
    EXPECT_DOUBLE_EQ(
        kl::referee::rooflineFloorSeconds(gemm, big, hopper, settings), 2.0 * 4096 * 8192 * 8192 / 7.0e14 * 0.9);
}

TEST(Physics, TimeBelowTheFloorRejects)
{
    kl::Evaluation e;
    e.shapes = { timed(4096, 8192, 10.0, 3.0), timed(16384, 8192, 140.0, 1.2) }; // floors ~20 us and ~111 us
    const auto rs = checkPhysics(e, rmsnorm(), h200(), PhysicsSettings {});
    ASSERT_EQ(count(rs, "physics.below-roofline"), 1);
    EXPECT_TRUE(rs.front().blocking);
    EXPECT_NE(rs.front().message.find("T=4096"), std::string::npos) << rs.front().message;
    // The graph-replay time is held to the same floor.
    e.shapes = { timed(4096, 8192, 40.0, 1.0) };
    e.shapes[0].graphTiming = kl::TimingStats {};
    e.shapes[0].graphTiming->medianUs = 5.0;
    EXPECT_EQ(count(checkPhysics(e, rmsnorm(), h200(), PhysicsSettings {}), "physics.below-roofline"), 1);
    e.shapes[0].graphTiming->medianUs = 35.0;
    EXPECT_TRUE(checkPhysics(e, rmsnorm(), h200(), PhysicsSettings {}).empty());
}

TEST(Physics, JumpOverTheBestGoesToReview)
{
    kl::Evaluation e;
    e.shapes = { timed(4096, 8192, 40.0, 3.5) };
    e.objective = 3.5;
    PhysicsSettings s;
    EXPECT_TRUE(checkPhysics(e, rmsnorm(), h200(), s).empty()) << "no best yet: nothing to jump over";
    s.bestObjective = 1.5;
    auto rs = checkPhysics(e, rmsnorm(), h200(), s);
    ASSERT_EQ(count(rs, "physics.suspicious-jump"), 1);
    EXPECT_FALSE(rs.front().blocking);
    e.objective = 2.9;
    EXPECT_TRUE(checkPhysics(e, rmsnorm(), h200(), s).empty());
    s.jumpFactor = 1.5;
    EXPECT_EQ(count(checkPhysics(e, rmsnorm(), h200(), s), "physics.suspicious-jump"), 1);
}

TEST(Physics, SpeedupCarriedByOneShapeGoesToReview)
{
    kl::Evaluation e;
    e.shapes = { timed(4096, 8192, 200.0, 6.0), timed(1024, 8192, 200.0, 1.02), timed(16384, 4096, 300.0, 0.98) };
    auto rs = checkPhysics(e, rmsnorm(), h200(), PhysicsSettings {});
    ASSERT_EQ(count(rs, "physics.single-shape-speedup"), 1);
    EXPECT_FALSE(rs.front().blocking);
    EXPECT_NE(rs.front().message.find("T=4096"), std::string::npos);
    // A broad win is not flagged.
    e.shapes = { timed(4096, 8192, 200.0, 2.0), timed(1024, 8192, 200.0, 2.2), timed(16384, 4096, 300.0, 1.9) };
    EXPECT_TRUE(checkPhysics(e, rmsnorm(), h200(), PhysicsSettings {}).empty());
    // Relative to the current best per shape: the same per-shape speedups are lopsided gains.
    PhysicsSettings s;
    s.bestShapeSpeedups = { { timed(1024, 8192, 0, 0).shape.label(), 2.2 },
        { timed(16384, 4096, 0, 0).shape.label(), 1.9 }, { timed(4096, 8192, 0, 0).shape.label(), 0.5 } };
    EXPECT_EQ(count(checkPhysics(e, rmsnorm(), h200(), s), "physics.single-shape-speedup"), 1);
    // A pure parameter change of an accepted source was judged shape by shape when the source was accepted.
    s.sourceAlreadyAccepted = true;
    EXPECT_TRUE(checkPhysics(e, rmsnorm(), h200(), s).empty());
    // Held-out shapes never carry the objective (they are not timed for it).
    e.shapes = { timed(4096, 8192, 200.0, 6.0), timed(1024, 8192, 200.0, 1.0) };
    e.shapes[0].heldOut = true;
    EXPECT_TRUE(checkPhysics(e, rmsnorm(), h200(), PhysicsSettings {}).empty());
}

} // namespace

namespace {

// What the loop and kloop eval --session tell the referee about the best: its objective and per-shape
// speedups, the session's review factor, and every accepted source.
TEST(CurrentBest, ComesFromTheSessionsAcceptedCandidates)
{
    kl::Session s;
    s.settings.reviewJumpFactor = 1.7;
    EXPECT_FALSE(kl::currentBestOf(s)) << "no accepted candidate yet";
    const auto add = [&](const std::string& id, const std::string& source, kl::CandidateStatus status, double objective,
                         double speedup) {
        kl::Candidate c;
        c.id = id;
        c.source = source;
        c.status = status;
        s.tree.add(c);
        kl::Evaluation e;
        e.candidateId = id;
        e.objective = objective;
        e.shapes = { timed(4096, 8192, 100.0, speedup), timed(16, 8192, 5.0, speedup * 2) };
        e.shapes.back().heldOut = true; // not timed for the objective: not part of the profile
        s.evaluations[id] = e;
    };
    add("c0001", "template", kl::CandidateStatus::Accepted, 1.2, 1.2);
    add("c0002", "faster", kl::CandidateStatus::Accepted, 1.5, 1.5);
    add("c0003", "cheat", kl::CandidateStatus::Rejected, 9.0, 9.0);
    const auto best = kl::currentBestOf(s);
    ASSERT_TRUE(best);
    EXPECT_DOUBLE_EQ(best->objective, 1.5);
    EXPECT_DOUBLE_EQ(best->reviewJumpFactor, 1.7);
    EXPECT_EQ(best->shapeSpeedups, (std::map<std::string, double> { { timed(4096, 8192, 0, 0).shape.label(), 1.5 } }));
    EXPECT_EQ(best->acceptedSources, (std::set<std::string> { "template", "faster" }));
    // The loop's own best (an engineer's approval) wins over the highest objective.
    EXPECT_DOUBLE_EQ(kl::currentBestOf(s, std::string("c0001"))->objective, 1.2);

    // Fed to the physics rules, a 3x jump over it goes to review.
    kl::referee::PhysicsSettings ps;
    ps.bestObjective = best->objective;
    ps.jumpFactor = best->reviewJumpFactor;
    kl::Evaluation e;
    e.objective = 4.5;
    e.shapes = { timed(4096, 8192, 100.0, 4.5) };
    EXPECT_EQ(count(checkPhysics(e, rmsnorm(), h200(), ps), "physics.suspicious-jump"), 1);
}

TEST(Physics, OneShapeCarryingTheGainIsJudgedWithinItsRegime)
{
    // Launch-bound decode shapes gain little, two prefill shapes gain 3x alike: lopsided over all shapes, even
    // within each regime. A shape that stands alone in its regime is still sent to review.
    kl::Problem p = rmsnorm();
    kl::Evaluation e;
    e.shapes = { timed(1, 8192, 2.0, 0.85), timed(16, 8192, 2.2, 0.9), timed(64, 8192, 2.5, 1.2),
        timed(4096, 8192, 60.0, 3.2), timed(32768, 8192, 400.0, 3.5) };
    EXPECT_EQ(count(checkPhysics(e, p, h200(), PhysicsSettings {}), "physics.single-shape-speedup"), 1);
    kl::Regime decode, prefill;
    decode.name = "decode";
    decode.condition = kl::Expr::parse("T <= 256");
    prefill.name = "prefill";
    prefill.condition = kl::Expr::parse("T > 256");
    p.regimes = { decode, prefill };
    EXPECT_TRUE(checkPhysics(e, p, h200(), PhysicsSettings {}).empty());
    e.shapes.push_back(timed(16384, 8192, 200.0, 1.1));
    e.shapes[3].speedup = 1.0;
    const auto rs = checkPhysics(e, p, h200(), PhysicsSettings {});
    ASSERT_EQ(count(rs, "physics.single-shape-speedup"), 1);
    EXPECT_NE(rs.front().message.find("in regime prefill"), std::string::npos) << rs.front().message;
}

} // namespace
