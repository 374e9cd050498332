// qa row 211: an LLM reply whose candidate carries a 6000-deep @kl:constraint crashed `kloop run` (SIGSEGV); it is
// a bad-annotations reply the model is told about, like any other.
#include "agent/prompt/reply_parser.h"

#include <gtest/gtest.h>

TEST(LlmReply, DeeplyNestedConstraintIsABadAnnotationsReply)
{
    const std::string reply
        = "NOTE: tighter tiles.\n```kl-candidate\n// @kl:param VEC = 8 in [4, 8]\n// @kl:constraint "
        + std::string(6000, '(') + "VEC <= 8" + std::string(6000, ')')
        + "\n// @kl:launch k grid=(T) block=(256) args=(y, x, w, T, H, eps)\n"
          "extern \"C\" __global__ void k(void* y, const void* x, const void* w, int T, int H, float eps) {}\n```\n";
    try {
        kl::prompt::parseReply(reply, nullptr);
        FAIL() << "accepted";
    } catch (const kl::prompt::ReplyError& e) {
        EXPECT_EQ(e.kind(), "bad-annotations");
        const std::string why = e.what();
        EXPECT_NE(why.find("line 2: @kl:constraint: expression '(((("), std::string::npos) << why.substr(0, 300);
        EXPECT_NE(why.find("nested more than 256 levels deep"), std::string::npos) << why.substr(0, 300);
        EXPECT_LT(why.size(), 500u) << "the model is told briefly, not sent its 12 KB back";
    }
}
