#include "core/candidate_tree.h"
#include "core/errors.h"

#include <gtest/gtest.h>

namespace {
kl::Candidate make(
    const std::string& id, const std::string& parent, kl::CandidateStatus s = kl::CandidateStatus::Accepted)
{
    kl::Candidate c;
    c.id = id;
    c.parentId = parent;
    c.status = s;
    return c;
}
} // namespace

TEST(CandidateTree, LinksLineageAndFilters)
{
    kl::CandidateTree t;
    t.add(make("c0001", ""));
    t.add(make("c0002", "c0001"));
    t.add(make("c0003", "c0001", kl::CandidateStatus::Rejected));
    t.add(make("c0004", "c0002", kl::CandidateStatus::PendingReview));
    EXPECT_EQ(t.roots(), (std::vector<std::string> { "c0001" }));
    EXPECT_EQ(t.children("c0001"), (std::vector<std::string> { "c0002", "c0003" }));
    EXPECT_EQ(t.lineage("c0004"), (std::vector<std::string> { "c0001", "c0002", "c0004" }));
    EXPECT_EQ(t.withStatus({ kl::CandidateStatus::Rejected, kl::CandidateStatus::PendingReview }),
        (std::vector<std::string> { "c0003", "c0004" }));
    EXPECT_EQ(t.nextId(), "c0005");
}

TEST(CandidateTree, RejectsDuplicatesAndOrphans)
{
    kl::CandidateTree t;
    t.add(make("c0001", ""));
    EXPECT_THROW(t.add(make("c0001", "")), kl::InputError);
    EXPECT_THROW(t.add(make("c0009", "nope")), kl::InputError);
    EXPECT_EQ(t.size(), 1u);
}

TEST(CandidateTree, BestFollowsTheObjectiveAndRollbackKeepsNodes)
{
    kl::CandidateTree t;
    t.add(make("a", ""));
    t.add(make("b", "a"));
    t.add(make("c", "b"));
    t.add(make("d", "a", kl::CandidateStatus::Rejected));
    const std::map<std::string, double> speed = { { "a", 1.0 }, { "b", 1.7 }, { "c", 1.4 }, { "d", 9.0 } };
    const auto best = t.best([&](const kl::Candidate& c) -> std::optional<double> {
        if (c.status != kl::CandidateStatus::Accepted)
            return std::nullopt;
        return speed.at(c.id);
    });
    ASSERT_TRUE(best);
    EXPECT_EQ(*best, "b");
    EXPECT_EQ(t.head(), "a");
    t.setHead("b");
    EXPECT_EQ(t.head(), "b");
    EXPECT_THROW(t.setHead("zz"), std::out_of_range);
    EXPECT_EQ(t.size(), 4u);
}
