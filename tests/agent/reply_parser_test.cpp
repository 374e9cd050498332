#include "agent/prompt/reply_parser.h"
#include "core/diff.h"
#include "core/session_store.h"

#include <gtest/gtest.h>

using kl::prompt::ParsedReply;
using kl::prompt::parseReply;
using kl::prompt::ReplyError;

namespace {

std::string fixture(const std::string& rel)
{
    return kl::readFile(std::string(KL_SOURCE_DIR) + "/tests/agent/fixtures/" + rel);
}

std::string errorKind(const std::string& reply, const std::string* base, std::string* message = nullptr)
{
    try {
        parseReply(reply, base);
    } catch (const ReplyError& e) {
        if (message)
            *message = e.what();
        return e.kind();
    }
    return "ok";
}

} // namespace

TEST(ReplyParser, CompleteCandidateWithNote)
{
    const std::string base = fixture("rmsnorm_mini/template.cu");
    std::string changed = base;
    changed.replace(changed.find("BLOCK = 256"), 11, "BLOCK = 512");
    const std::string reply = "I will widen the block.\nNOTE: default block 512 for long rows\n```kl-candidate\n"
        + changed + "```\nThanks.";
    ParsedReply r = parseReply(reply, &base);
    EXPECT_EQ(r.kind, ParsedReply::Kind::Candidate);
    EXPECT_EQ(r.note, "default block 512 for long rows");
    EXPECT_EQ(r.source, changed);
    ASSERT_EQ(r.spec.params.size(), 1u);
    EXPECT_EQ(r.spec.defaults().at("BLOCK"), 512);
    ASSERT_EQ(r.spec.launches.size(), 1u);
    EXPECT_EQ(r.spec.launches[0].kernel, "rmsnorm_kernel");
}

TEST(ReplyParser, DiffAgainstTheBaseIsApplied)
{
    const std::string base = fixture("rmsnorm_mini/template.cu");
    std::string changed = base;
    changed.replace(changed.find("[128, 256, 512, 1024]"), 21, "[64, 128, 256, 512, 1024]");
    changed.replace(changed.find("sum += v * v;"), 13, "sum = fmaf(v, v, sum);");
    const std::string diff = kl::unifiedDiff(base, changed, "a/candidate.cu", "b/candidate.cu");
    ParsedReply r = parseReply("NOTE: fma\n```kl-diff\n" + diff + "```\n", &base);
    EXPECT_EQ(r.kind, ParsedReply::Kind::Diff);
    EXPECT_EQ(r.source, changed);
    EXPECT_EQ(r.spec.params[0].values.size(), 5u);
}

TEST(ReplyParser, MalformedRepliesAreNamed)
{
    const std::string base = fixture("rmsnorm_mini/template.cu");
    std::string msg;
    EXPECT_EQ(errorKind("Here is my idea, no code.", &base, &msg), "malformed-reply");
    EXPECT_NE(msg.find("no ```kl-candidate"), std::string::npos);

    EXPECT_EQ(errorKind("```cuda\n" + base + "```\n", &base, &msg), "malformed-reply");
    EXPECT_NE(msg.find("```cuda"), std::string::npos) << msg;

    EXPECT_EQ(errorKind("```kl-candidate\n" + base + "```\n```kl-candidate\n" + base + "```\n", &base, &msg),
        "malformed-reply");
    EXPECT_NE(msg.find("2 kl blocks"), std::string::npos) << msg;

    EXPECT_EQ(errorKind("```kl-candidate\n" + base.substr(0, 200), &base, &msg), "malformed-reply");
    EXPECT_NE(msg.find("never closed"), std::string::npos) << msg;

    EXPECT_EQ(errorKind("```kl-patch\nx\n```\n", &base, &msg), "malformed-reply");
    EXPECT_EQ(errorKind("```kl-candidate\n\n```\n", &base), "malformed-reply");
}

TEST(ReplyParser, DiffThatDoesNotApply)
{
    const std::string base = fixture("rmsnorm_mini/template.cu");
    const std::string diff
        = "--- a/candidate.cu\n+++ b/candidate.cu\n@@ -5,2 +5,2 @@\n-this line is not in the source\n+x\n";
    std::string msg;
    EXPECT_EQ(errorKind("```kl-diff\n" + diff + "```\n", &base, &msg), "diff-does-not-apply");
    EXPECT_NE(msg.find("does not apply"), std::string::npos) << msg;
    EXPECT_EQ(errorKind("```kl-diff\nno hunks here\n```\n", &base), "diff-does-not-apply");
    // Without a current candidate a diff has nothing to apply to.
    EXPECT_EQ(errorKind("```kl-diff\n" + diff + "```\n", nullptr, &msg), "malformed-reply");
    EXPECT_NE(msg.find("complete ```kl-candidate"), std::string::npos) << msg;
}

TEST(ReplyParser, CandidatesWithBadAnnotations)
{
    const std::string base = fixture("rmsnorm_mini/template.cu");
    std::string msg;
    std::string bad = base;
    bad.replace(bad.find("BLOCK = 256 in"), 14, "BLOCK = 256 of");
    EXPECT_EQ(errorKind("```kl-candidate\n" + bad + "```\n", &base, &msg), "bad-annotations");
    EXPECT_NE(msg.find("line 1"), std::string::npos) << msg;

    std::string noLaunch = base;
    noLaunch.erase(noLaunch.find("// @kl:launch"),
        noLaunch.find('\n', noLaunch.find("// @kl:launch")) - noLaunch.find("// @kl:launch") + 1);
    EXPECT_EQ(errorKind("```kl-candidate\n" + noLaunch + "```\n", &base, &msg), "bad-annotations");
    EXPECT_NE(msg.find("@kl:launch"), std::string::npos) << msg;

    std::string wrongKernel = base;
    wrongKernel.replace(wrongKernel.find("launch rmsnorm_kernel"), 21, "launch rms_kernel_v2");
    EXPECT_EQ(errorKind("```kl-candidate\n" + wrongKernel + "```\n", &base, &msg), "bad-annotations");
    EXPECT_NE(msg.find("rms_kernel_v2"), std::string::npos) << msg;

    EXPECT_EQ(errorKind("```kl-candidate\n" + base + "```\n", &base), "no-change");
}

TEST(ReplyParser, ProtocolTextMatchesTheParser)
{
    // The example in the protocol text must itself be a block the parser recognises.
    const std::string text = kl::prompt::replyProtocolText(true);
    EXPECT_NE(text.find("```kl-candidate"), std::string::npos);
    EXPECT_NE(text.find("```kl-diff"), std::string::npos);
    EXPECT_EQ(kl::prompt::replyProtocolText(false).find("```kl-diff"), std::string::npos);
}
