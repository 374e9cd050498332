#include "agent/tuner/search_space.h"
#include "core/errors.h"
#include "tests/core/synthetic_evaluator.h"

#include <gtest/gtest.h>
#include <set>

using namespace kl;
using namespace kl::tuner;

TEST(SearchSpace, AppliesConstraintsOnEveryShapeAndDeviceLimits)
{
    const KernelSpec spec = parseKernelSpec(testonly::kSyntheticTemplate);
    DeviceInfo dev = testonly::syntheticDevice();
    Shape narrow;
    narrow.dims = { { "T", 4 }, { "H", 128 } }; // H % (VEC*32) == 0 leaves VEC in {1, 2, 4}
    const SearchSpace s = SearchSpace::build(spec, { narrow }, dev);
    EXPECT_EQ(s.stats().declared, 6u * 4 * 3 * 3);
    for (std::size_t i = 0; i < s.size(); ++i) {
        const ParamValues& p = s.config(i);
        EXPECT_LE(p.at("VEC"), 4);
        EXPECT_LE(p.at("BLOCK") * p.at("VEC") * p.at("ROWS") * 8, dev.sharedPerBlockOptin);
    }
    EXPECT_GT(s.stats().prunedByRule.at("constraint"), 0u);
    EXPECT_GT(s.stats().prunedByRule.at("device.shared-memory"), 0u);

    dev.maxThreadsPerBlock = 256;
    const SearchSpace small = SearchSpace::build(spec, { narrow }, dev);
    for (std::size_t i = 0; i < small.size(); ++i)
        EXPECT_LE(small.config(i).at("BLOCK"), 256);
    EXPECT_GT(small.stats().prunedByRule.at("device.threads-per-block"), 0u);
}

// A plan of two kernels with parameters of their own (gemm_bf16's persistent and skinny paths): each check reads its
// own parameters only, and a configuration pruned by several is counted under the first in order (constraints, the
// architecture, then the launch lines in plan order), as one check of the whole configuration would.
TEST(SearchSpace, IndependentLaunchesArePrunedInPlanOrder)
{
    const KernelSpec spec = parseKernelSpec("// @kl:param A = 1 in [1, 2, 3, 4, 5, 6, 7, 8]\n"
                                            "// @kl:param B = 1 in [1, 2, 3, 4, 5, 6, 7, 8]\n"
                                            "// @kl:param C = 1 in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
                                            "// @kl:constraint A != 2\n"
                                            "// @kl:launch first grid=(T) block=(A * 128) smem=0 args=(T)\n"
                                            "// @kl:launch second grid=(T) block=(64) smem=(B * 40000) args=(T)\n");
    DeviceInfo dev = testonly::syntheticDevice();
    dev.maxThreadsPerBlock = 768; // the first launch fits for A <= 6
    dev.sharedPerBlockOptin = 200000; // the second for B <= 5
    Shape s;
    s.dims = { { "T", 4 }, { "H", 128 } };
    const SearchSpace space = SearchSpace::build(spec, { s }, dev);
    EXPECT_EQ(space.stats().declared, 8u * 8 * 10);
    // A = 2 breaks the constraint whatever B is; A = 7, 8 the first launch whatever B is; of A = 1, 3, 4, 5, 6,
    // B = 6, 7, 8 break the second launch.
    EXPECT_EQ(space.stats().prunedByRule.at("constraint"), 1u * 8 * 10);
    EXPECT_EQ(space.stats().afterConstraints, 7u * 8 * 10);
    EXPECT_EQ(space.stats().prunedByRule.at("device.threads-per-block"), 2u * 8 * 10);
    EXPECT_EQ(space.stats().prunedByRule.at("device.shared-memory"), 5u * 3 * 10);
    EXPECT_EQ(space.size(), 5u * 5 * 10);
    for (std::size_t i = 0; i < space.size(); ++i) {
        EXPECT_NE(space.config(i).at("A"), 2);
        EXPECT_LE(space.config(i).at("A"), 6);
        EXPECT_LE(space.config(i).at("B"), 5);
    }
}

TEST(SearchSpace, IndexesNeighboursAndNearest)
{
    const KernelSpec spec = parseKernelSpec(testonly::kSyntheticTemplate);
    const Problem p = testonly::syntheticProblem();
    const SearchSpace s = SearchSpace::build(spec, p.verifyShapes, testonly::syntheticDevice());
    ASSERT_GT(s.size(), 50u);
    std::set<ParamValues> seen;
    for (std::size_t i = 0; i < s.size(); ++i) {
        EXPECT_TRUE(seen.insert(s.config(i)).second);
        EXPECT_EQ(s.indexOf(s.config(i)), i);
        for (std::size_t j : s.neighbours(i)) {
            int differing = 0;
            for (const auto& [k, v] : s.config(i))
                differing += s.config(j).at(k) != v;
            EXPECT_EQ(differing, 1);
        }
        EXPECT_EQ(s.nearest(s.valueIndices(i)), i);
    }
    EXPECT_FALSE(s.indexOf({ { "BLOCK", 3 } }));
}

TEST(SearchSpace, EmptyOrHugeSpacesAreInputErrors)
{
    const KernelSpec impossible = parseKernelSpec("// @kl:param A = 1 in [1, 2]\n// @kl:constraint A > 5\n"
                                                  "// @kl:launch k grid=(1) block=(32) smem=0 args=()\n");
    EXPECT_THROW(SearchSpace::build(impossible, {}, testonly::syntheticDevice()), InputError);
    const KernelSpec spec = parseKernelSpec(testonly::kSyntheticTemplate);
    EXPECT_THROW(SearchSpace::build(spec, {}, testonly::syntheticDevice(), 10), InputError);
}
