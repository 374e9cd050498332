#include "core/candidate.h"

#include <gtest/gtest.h>

using namespace kl;

namespace {

Candidate seededBaseline(CandidateStatus status, const std::string& reason)
{
    Candidate c;
    c.id = "c0001";
    c.agent = kSeededBaselineAgent;
    c.status = status;
    c.statusReason = reason;
    return c;
}

} // namespace

TEST(CandidateDisplayState, TheMeasuredSeededBaselineIsShownAsBaselineNotRejected)
{
    const Candidate c = seededBaseline(CandidateStatus::Rejected,
        "decide.not-significant: not significantly faster than the baseline: 1.000x, 95% CI [0.998, 1.002]");
    EXPECT_TRUE(isSeededBaseline(c));
    EXPECT_EQ(displayState(c), "baseline");
    EXPECT_EQ(displayReason(c).find("not significantly faster"), std::string::npos) << displayReason(c);
    EXPECT_NE(displayReason(c).find("baseline"), std::string::npos);
    EXPECT_EQ(displayState(seededBaseline(CandidateStatus::Accepted, "decide.faster: ...")), "baseline");
}

TEST(CandidateDisplayState, ABaselineThatFailedOrIsStillRunningShowsItsRealStatus)
{
    // A broken baseline must not hide behind the label.
    EXPECT_EQ(displayState(seededBaseline(CandidateStatus::CompileFailed, "nvrtc: error")), "compile-failed");
    EXPECT_EQ(displayState(seededBaseline(CandidateStatus::Rejected, "correctness.rel-l2: 0.3 > 0.01")), "rejected");
    EXPECT_EQ(displayReason(seededBaseline(CandidateStatus::Rejected, "correctness.rel-l2: 0.3 > 0.01")),
        "correctness.rel-l2: 0.3 > 0.01");
    EXPECT_EQ(displayState(seededBaseline(CandidateStatus::Timing, "")), "timing");
}

TEST(CandidateDisplayState, OtherCandidatesShowTheirStatus)
{
    Candidate templateChild = seededBaseline(CandidateStatus::Rejected, "decide.not-significant: ...");
    templateChild.agent = "problem:template";
    templateChild.parentId = "c0001";
    EXPECT_FALSE(isSeededBaseline(templateChild));
    EXPECT_EQ(displayState(templateChild), "rejected");
    EXPECT_EQ(displayReason(templateChild), "decide.not-significant: ...");
    // A non-root with the baseline's agent (a copy of it elsewhere in the tree) is an ordinary candidate.
    Candidate copy = seededBaseline(CandidateStatus::Rejected, "decide.slower: ...");
    copy.parentId = "c0002";
    EXPECT_EQ(displayState(copy), "rejected");
}
