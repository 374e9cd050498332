// CPU parts of the harness's isolation (kernels/harness_plan.h): slab layouts and their guards, the output
// rotation period, the measured-tolerance rule, and the load_problem "tolerances" wire form.
#include "core/errors.h"
#include "kernels/harness_plan.h"
#include "kernels/worker_protocol.h"

#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <numeric>
#include <random>

TEST(HarnessPlan, SlabBuffersSitBetweenCanariesAndTheLastEndsAtTheGuard)
{
    std::mt19937_64 rng(7);
    const std::uint64_t gran = 2u << 20;
    for (std::uint64_t bytes : { 2ull, 1000ull, 4096ull, 123457ull, 3ull << 20, 100ull << 20 }) {
        for (int sets : { 1, 2, 5, 64, 2048 }) {
            if (bytes * sets > (4ull << 30))
                continue;
            const kl::SlabLayout l = kl::planSlab(bytes, sets, gran, rng);
            SCOPED_TRACE(std::to_string(bytes) + " bytes x " + std::to_string(sets));
            EXPECT_EQ(l.sets(), sets);
            EXPECT_EQ(l.mappedBytes % gran, 0u);
            EXPECT_EQ(l.mappedBytes, l.lead + static_cast<std::uint64_t>(sets) * l.stride);
            EXPECT_LT(l.lead, gran) << "the lead only absorbs the granularity";
            std::uint64_t previousEnd = 0;
            for (int k = 0; k < sets; ++k) {
                const std::uint64_t off = l.bufferOffset(k);
                EXPECT_EQ(off % kl::SlabLayout::kAlign, 0u) << "set " << k;
                // A canary of at least kCanaryBytes on both sides of every buffer, inside its own stride.
                EXPECT_GE(off, l.lead + k * l.stride + kl::SlabLayout::kCanaryBytes);
                EXPECT_GE(off, previousEnd + kl::SlabLayout::kCanaryBytes);
                const std::uint64_t end = off + bytes;
                EXPECT_LE(end + kl::SlabLayout::kCanaryBytes, l.lead + (k + 1) * l.stride);
                previousEnd = end;
            }
            // The last buffer's trailing canary ends exactly at the mapping's end: one step further faults.
            const std::uint64_t lastAligned = l.bufferOffset(sets - 1)
                + (std::max<std::uint64_t>(bytes, 4) + kl::SlabLayout::kAlign - 1) / kl::SlabLayout::kAlign
                    * kl::SlabLayout::kAlign;
            EXPECT_EQ(lastAligned + kl::SlabLayout::kCanaryBytes, l.mappedBytes);
        }
    }
}

TEST(HarnessPlan, SlabGapsAreRandomAndPlansRejectBadInput)
{
    std::mt19937_64 rng(11);
    const kl::SlabLayout a = kl::planSlab(4096, 64, 2u << 20, rng);
    const kl::SlabLayout b = kl::planSlab(4096, 64, 2u << 20, rng);
    EXPECT_NE(a.gapUnits, b.gapUnits) << "two calls must not place buffers alike";
    EXPECT_THROW(kl::planSlab(16, 0, 2u << 20, rng), std::invalid_argument);
    EXPECT_THROW(kl::planSlab(16, kl::SlabLayout::kMaxSets + 1, 2u << 20, rng), std::invalid_argument);
    EXPECT_THROW(kl::planSlab(16, 2, 1000, rng), std::invalid_argument);
    const kl::SlabLayout packed = kl::packedSlab(1000, 3);
    EXPECT_EQ(packed.bufferOffset(0), 0u);
    EXPECT_EQ(packed.bufferOffset(2), 2 * 1024u);
    EXPECT_EQ(packed.mappedBytes, 3 * 1024u);
}

TEST(HarnessPlan, OutputRotationIsCoprimeWithTheInputsAndCoversACycle)
{
    for (int inputs = 1; inputs <= 300; ++inputs) {
        for (int cycle : { 1, inputs, inputs + 7, 3 * inputs }) {
            const int p = kl::outputRotationPeriod(inputs, cycle);
            EXPECT_EQ(std::gcd(p, inputs), 1) << inputs << " " << cycle;
            EXPECT_GT(p, inputs);
            EXPECT_GE(p, cycle);
            // A stale output is wrong for its new inputs: consecutive visits of output 0 meet different input sets.
            if (inputs > 1) {
                EXPECT_NE(0, p % inputs) << inputs;
            }
        }
    }
    EXPECT_EQ(kl::outputRotationPeriod(4, 4), 5);
    EXPECT_EQ(kl::outputRotationPeriod(6, 6), 7);
    EXPECT_EQ(kl::outputRotationPeriod(6, 8), 11) << "8, 9, 10 share a factor with 6";
    EXPECT_THROW(kl::outputRotationPeriod(0, 1), std::invalid_argument);
}

TEST(HarnessPlan, MeasuredToleranceIsFactorTimesMeasuredAboveTheRoundingFloorBelowTheStated)
{
    const kl::Tolerance stated { 0.01, 0.02 };
    const kl::Tolerance floor = kl::roundingFloor(kl::DType::BF16);
    EXPECT_DOUBLE_EQ(floor.relL2, std::ldexp(1.0, -8));
    EXPECT_DOUBLE_EQ(floor.maxAbs, std::ldexp(1.0, -6));
    EXPECT_DOUBLE_EQ(kl::roundingFloor(kl::DType::F16).relL2, std::ldexp(1.0, -11));
    EXPECT_DOUBLE_EQ(kl::roundingFloor(kl::DType::F32).relL2, std::ldexp(1.0, -24));
    EXPECT_DOUBLE_EQ(kl::roundingFloor(kl::DType::I32).relL2, 0.0);

    // An honest fp32 build as exact as the rounding: the floor decides, well inside the stated 1% / 2%.
    kl::Tolerance t = kl::measuredTolerance(kl::DType::BF16, stated, 1e-5, 1e-4);
    EXPECT_DOUBLE_EQ(t.relL2, floor.relL2);
    EXPECT_DOUBLE_EQ(t.maxAbs, floor.maxAbs);
    // A larger measured error: factor x measured.
    t = kl::measuredTolerance(kl::DType::BF16, stated, 1e-3, 4e-3);
    EXPECT_DOUBLE_EQ(t.relL2, kl::kMeasuredToleranceFactor * 1e-3);
    EXPECT_DOUBLE_EQ(t.maxAbs, 0.02) << "never looser than stated";
    // Never looser than stated, and a failed calibration keeps the stated budget.
    t = kl::measuredTolerance(kl::DType::BF16, stated, 0.5, 0.5);
    EXPECT_DOUBLE_EQ(t.relL2, 0.01);
    t = kl::measuredTolerance(kl::DType::F32, stated, INFINITY, NAN);
    EXPECT_DOUBLE_EQ(t.relL2, 0.01);
    EXPECT_DOUBLE_EQ(t.maxAbs, 0.02);
    // fp32 outputs: the measured error, not bf16's rounding, sets the budget.
    t = kl::measuredTolerance(kl::DType::F32, stated, 1e-6, 1e-5);
    EXPECT_DOUBLE_EQ(t.relL2, 8e-6);
    EXPECT_DOUBLE_EQ(t.maxAbs, 8e-5);
}

TEST(HarnessPlan, ToleranceWireFormRoundTripsAndNamesBadFields)
{
    kl::wire::OutputToleranceWire t { "y", "bf16", { 0.01, 0.02 }, 3e-5, INFINITY, { 0.0039, 0.02 } };
    const auto j = kl::wire::toJson(t);
    EXPECT_DOUBLE_EQ(j["measured_fp32_vs_fp64"]["max_abs"].get<double>(), -1.0) << "non-finite travels as -1";
    const auto back = kl::wire::outputTolerance(kl::wire::Json::parse(j.dump()), "tolerances.y");
    EXPECT_EQ(back.output, "y");
    EXPECT_EQ(back.dtype, "bf16");
    EXPECT_DOUBLE_EQ(back.measuredRelL2, 3e-5);
    EXPECT_DOUBLE_EQ(back.tolerance.relL2, 0.0039);
    EXPECT_DOUBLE_EQ(back.stated.maxAbs, 0.02);
    auto broken = j;
    broken["tolerance"].erase("rel_l2");
    try {
        kl::wire::outputTolerance(broken, "tolerances.y");
        FAIL() << "missing field accepted";
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("tolerances.y.tolerance"), std::string::npos) << e.what();
    }
}

// An in-place tensor's buffer is restored before a timed batch from the pristine copy of the input set that the
// batch's launch writing that buffer reads, so the re-check's reference (computed per input set) is the right one.
TEST(HarnessPlan, InPlaceBuffersAreRestoredFromTheInputSetTheirNextLaunchReads)
{
    for (const int sets : { 4, 6, 9 }) {
        const int outSets = kl::outputRotationPeriod(sets, sets);
        for (const std::uint64_t launchesSoFar : { 0ull, 3ull, 17ull, 1000003ull }) {
            std::vector<int> seen(static_cast<std::size_t>(outSets), 0);
            for (std::uint64_t j = launchesSoFar; j < launchesSoFar + outSets; ++j) {
                const int q = static_cast<int>(j % outSets);
                ++seen[static_cast<std::size_t>(q)];
                EXPECT_EQ(kl::inputSetOfNextWrite(q, false, launchesSoFar, sets, outSets), static_cast<int>(j % sets))
                    << "launch " << j << " of a batch starting at " << launchesSoFar;
            }
            EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), outSets) << "one launch per buffer in a batch";
        }
        for (int q = 0; q < outSets; ++q)
            EXPECT_EQ(kl::inputSetOfNextWrite(q, true, 12345, sets, outSets), q % sets) << "graph launch q writes q";
    }
}
