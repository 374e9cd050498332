#include "core/diff.h"

#include <gtest/gtest.h>

using namespace kl;

TEST(ParamDiff, ListsChangedAddedAndRemovedParametersInNameOrder)
{
    const std::map<std::string, std::int64_t> parent { { "THREADS", 256 }, { "VEC", 8 }, { "CACHE", 4 } };
    const std::map<std::string, std::int64_t> child { { "THREADS", 128 }, { "VEC", 8 }, { "ROWS", 2 } };
    const auto changes = paramDiff(parent, child);
    ASSERT_EQ(changes.size(), 3u);
    EXPECT_EQ(changes[0].text(), "CACHE 4 -> (unset)");
    EXPECT_EQ(changes[1].text(), "ROWS (unset) -> 2");
    EXPECT_EQ(changes[2].text(), "THREADS 256 -> 128");
    EXPECT_EQ(changes[2].oldValue, 256);
    EXPECT_EQ(changes[2].newValue, 128);
}

TEST(ParamDiff, EqualParametersGiveNoChanges)
{
    const std::map<std::string, std::int64_t> p { { "THREADS", 256 } };
    EXPECT_TRUE(paramDiff(p, p).empty());
    EXPECT_TRUE(paramDiff({}, {}).empty());
}
