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
