// Physics rules on synthetic evaluations: impossible times reject, big or lopsided wins go to review.
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

TEST(Physics, RooflineFloorUsesMeasuredBandwidthAndL2)
{
    const PhysicsSettings settings;
    kl::Shape big;
    big.dims = { { "T", 4096 }, { "H", 8192 } };
    const double bytes = 2.0 * (2.0 * 4096 * 8192 + 8192);
    EXPECT_DOUBLE_EQ(kl::referee::rooflineFloorSeconds(rmsnorm(), big, h200(), settings), bytes / 4.0e12 * 0.9);
    kl::Shape small; // 2 MiB: fits in L2, so the floor allows L2 bandwidth
    small.dims = { { "T", 64 }, { "H", 8192 } };
    const double smallBytes = 2.0 * (2.0 * 64 * 8192 + 8192);
    EXPECT_DOUBLE_EQ(kl::referee::rooflineFloorSeconds(rmsnorm(), small, h200(), settings),
        smallBytes / (4.0e12 * settings.l2BandwidthFactor) * 0.9);
    PhysicsSettings compute;
    compute.peakFlops = 1.0e12; // a compute floor above the memory floor wins
    EXPECT_DOUBLE_EQ(
        kl::referee::rooflineFloorSeconds(rmsnorm(), big, h200(), compute), 4.0 * 4096 * 8192 / 1.0e12 * 0.9);
    // Without a measured peak the compute floor comes from SMs x clock x a rate above any tensor core.
    kl::Problem gemm = rmsnorm();
    gemm.bytes = kl::Expr::parse("2*(T*H + H*H + T*H)");
    gemm.flops = kl::Expr::parse("2*T*H*H");
    kl::DeviceInfo clocked = h200();
    clocked.smCount = 132;
    clocked.smClockMHz = 1980;
    clocked.measuredCopyBandwidth = 0; // the compute floor alone
    const double peak = 132 * 1980e6 * PhysicsSettings {}.flopsPerClockPerSm;
    EXPECT_DOUBLE_EQ(
        kl::referee::rooflineFloorSeconds(gemm, big, clocked, settings), 2.0 * 4096 * 8192 * 8192 / peak * 0.9);
    kl::DeviceInfo unmeasured = h200();
    unmeasured.measuredCopyBandwidth = 0;
    EXPECT_EQ(kl::referee::rooflineFloorSeconds(rmsnorm(), big, unmeasured, settings), 0.0);
}

TEST(Physics, TimeBelowTheFloorRejects)
{
    kl::Evaluation e;
    e.shapes = { timed(4096, 8192, 20.0, 3.0), timed(16384, 8192, 140.0, 1.2) }; // floors 30.2 us and 120.8 us
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
    // Held-out shapes never carry the objective (they are not timed for it).
    e.shapes = { timed(4096, 8192, 200.0, 6.0), timed(1024, 8192, 200.0, 1.0) };
    e.shapes[0].heldOut = true;
    EXPECT_TRUE(checkPhysics(e, rmsnorm(), h200(), PhysicsSettings {}).empty());
}

} // namespace
