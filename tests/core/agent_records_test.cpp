// The LLM agent's typed journal records: each written form reads back as the same value, a record of another type
// or of a wrong shape reads as nullopt (shown raw by the workbench), and older records missing keys still read.
#include "core/agent_records.h"

#include <gtest/gtest.h>

using namespace kl;
using nlohmann::json;

TEST(AgentRecords, ProposalRoundTripsAndNamesItsType)
{
    const LlmProposalRecord p { 3, "diff", "c0002", "ab12", { { "THREADS", 128 } }, true, "vectorised loads" };
    const json j = toJson(p);
    EXPECT_EQ(j["type"], "llm.proposal");
    EXPECT_EQ(agentRecordType(j), kLlmProposalType);
    const auto back = llmProposalRecord(j);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->call, 3);
    EXPECT_EQ(back->form, "diff");
    EXPECT_EQ(back->baseCandidate, "c0002");
    EXPECT_EQ(back->sourceSha256, "ab12");
    EXPECT_EQ(back->params, (ParamValues { { "THREADS", 128 } }));
    EXPECT_TRUE(back->needsReview);
    EXPECT_EQ(back->note, "vectorised loads");
    EXPECT_FALSE(llmVerdictRecord(j));
    EXPECT_FALSE(llmReplyRecord(j));
}

TEST(AgentRecords, VerdictRoundTripsWithItsReasons)
{
    const LlmVerdictRecord v { "c0007", "ff00", "rejected", 0.93,
        { { "static.side-stream", "creates a stream", 12, true }, { "perf.noise", "noisy", 0, false } } };
    const json j = toJson(v);
    EXPECT_EQ(j["type"], "llm.verdict");
    EXPECT_EQ(j["reasons"][0]["rule"], "static.side-stream");
    const auto back = llmVerdictRecord(j);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->candidate, "c0007");
    EXPECT_EQ(back->verdict, "rejected");
    EXPECT_DOUBLE_EQ(back->objective, 0.93);
    ASSERT_EQ(back->reasons.size(), 2u);
    EXPECT_EQ(back->reasons[0].line, 12);
    EXPECT_TRUE(back->reasons[0].blocking);
    EXPECT_EQ(back->reasons[1].rule, "perf.noise");
    EXPECT_FALSE(back->reasons[1].blocking);
}

TEST(AgentRecords, ErrorRetryAndRejectedReplyRoundTrip)
{
    const auto error = llmErrorRecord(toJson(LlmErrorRecord { 2, "rate-limited", 429, "slow down", "s7" }));
    ASSERT_TRUE(error);
    EXPECT_EQ(error->kind, "rate-limited");
    EXPECT_EQ(error->httpStatus, 429);
    EXPECT_EQ(error->message, "slow down");
    EXPECT_EQ(error->liveStream, "s7");
    EXPECT_FALSE(toJson(LlmErrorRecord { 2, "network", 0, "x", "" }).contains(kLiveStreamKey));

    const auto retry = llmRetryRecord(toJson(LlmRetryRecord { 2, 3, 1500, "HTTP 503" }));
    ASSERT_TRUE(retry);
    EXPECT_EQ(retry->nextAttempt, 3);
    EXPECT_EQ(retry->delayMs, 1500);
    EXPECT_EQ(retry->why, "HTTP 503");

    const auto rejected
        = llmReplyRejectedRecord(toJson(LlmReplyRejectedRecord { 4, 2, "no-candidate", "no kl-candidate block" }));
    ASSERT_TRUE(rejected);
    EXPECT_EQ(rejected->call, 4);
    EXPECT_EQ(rejected->replyAttempt, 2);
    EXPECT_EQ(rejected->kind, "no-candidate");
    EXPECT_EQ(toJson(*rejected)["type"], "llm.reply-rejected");
}

TEST(AgentRecords, WrongShapesAreNotRecordsMissingKeysAre)
{
    EXPECT_FALSE(llmProposalRecord(json { { "type", "llm.proposal" }, { "call", "three" } }));
    EXPECT_FALSE(llmProposalRecord(json { { "type", "llm.proposal" }, { "params", { { "T", "big" } } } }));
    EXPECT_FALSE(llmVerdictRecord(json { { "type", "llm.verdict" }, { "reasons", "none" } }));
    EXPECT_FALSE(llmVerdictRecord(json { { "type", "llm.verdict" }, { "reasons", { { { "message", "no rule" } } } } }));
    EXPECT_FALSE(llmRetryRecord(json::array()));
    EXPECT_FALSE(llmErrorRecord(json { { "type", "llm.retry" } }));
    const auto old = llmVerdictRecord(json { { "type", "llm.verdict" }, { "candidate", "c0001" } });
    ASSERT_TRUE(old);
    EXPECT_EQ(old->candidate, "c0001");
    EXPECT_TRUE(old->reasons.empty());
}
