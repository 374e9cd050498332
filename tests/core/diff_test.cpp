#include "core/diff.h"
#include "core/errors.h"

#include <gtest/gtest.h>
#include <random>

TEST(Diff, UnifiedDiffHasHunkHeaders)
{
    const std::string a = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
    const std::string b = "a\nb\nc\nD\ne\nf\ng\nh\ni\nj\nk\n";
    const std::string d = kl::unifiedDiff(a, b, "old.cu", "new.cu", 1);
    EXPECT_EQ(d,
        "--- old.cu\n+++ new.cu\n"
        "@@ -3,3 +3,3 @@\n c\n-d\n+D\n e\n"
        "@@ -10,1 +10,2 @@\n j\n+k\n");
}

TEST(Diff, IdenticalTextsHaveNoHunks)
{
    EXPECT_TRUE(kl::diffHunks("x\ny\n", "x\ny\n").empty());
    EXPECT_EQ(kl::unifiedDiff("x\n", "x\n", "a", "b"), "");
}

TEST(Diff, EditScriptIsMinimal)
{
    const auto lines = kl::diffLines({ "a", "b", "c", "a", "b", "b", "a" }, { "c", "b", "a", "b", "a", "c" });
    int edits = 0;
    for (const auto& l : lines)
        edits += l.kind != kl::DiffLine::Kind::Context;
    EXPECT_EQ(edits, 5); // the classic Myers example has D = 5
}

// Property: applying the diff of (a, b) to a gives b, on fresh random texts each run.
TEST(Diff, RoundTripOnRandomTexts)
{
    std::mt19937 rng(std::random_device {}());
    const std::uint32_t seed = rng();
    rng.seed(seed);
    for (int iter = 0; iter < 300; ++iter) {
        std::vector<std::string> pool = { "int x;", "x += 1;", "}", "{", "", "return y;", "// c", "a[i] = b[i];" };
        auto randomText = [&](int n) {
            std::string s;
            for (int i = 0; i < n; ++i)
                s += pool[rng() % pool.size()] + "\n";
            return s;
        };
        const std::string a = randomText(static_cast<int>(rng() % 40));
        std::string b;
        for (const auto& l : kl::splitLines(a)) {
            const int r = static_cast<int>(rng() % 10);
            if (r == 0)
                continue;
            if (r == 1)
                b += pool[rng() % pool.size()] + "\n";
            b += l + "\n";
        }
        if (rng() % 3 == 0)
            b += randomText(3);
        const int context = static_cast<int>(rng() % 4);
        const std::string d = kl::unifiedDiff(a, b, "a", "b", context);
        if (d.empty()) {
            EXPECT_EQ(a, b);
            continue;
        }
        EXPECT_EQ(kl::applyUnifiedDiff(a, d), b) << "seed " << seed << " iteration " << iter << "\n" << d;
    }
}

TEST(Diff, PatchThatDoesNotApplyNamesTheHunk)
{
    const std::string a = "one\ntwo\nthree\n";
    const std::string patch = "--- a\n+++ b\n@@ -1,2 +1,2 @@\n one\n-TWO\n+2\n";
    try {
        kl::applyUnifiedDiff(a, patch);
        FAIL();
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("hunk 1"), std::string::npos) << e.what();
    }
    EXPECT_THROW(kl::applyUnifiedDiff(a, "not a diff"), kl::InputError);
}

TEST(Diff, PatchWithShiftedLineNumbersStillApplies)
{
    const std::string a = "h1\nh2\none\ntwo\nthree\n";
    // LLMs often get the numbers wrong; context decides where it applies.
    const std::string patch = "@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n";
    EXPECT_EQ(kl::applyUnifiedDiff(a, patch), "h1\nh2\none\n2\nthree\n");
}

// qa row 240: --context 2147483647 overflowed `end + context` and `2 * context` (SIGSEGV).
TEST(Diff, ContextBeyondTheTextShowsTheWholeTextAndNegativeIsAnError)
{
    const std::string a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n";
    const std::string b = "1\n2\nthree\n4\n5\n6\n7\n8\nnine\n10\n";
    const auto whole = kl::diffHunks(a, b, 10);
    ASSERT_EQ(whole.size(), 1u);
    EXPECT_EQ(whole[0].oldStart, 1);
    EXPECT_EQ(whole[0].oldCount, 10);
    for (int context : { 2147483647, 2147483646, 1000000000 }) {
        const auto hunks = kl::diffHunks(a, b, context);
        ASSERT_EQ(hunks.size(), 1u) << context;
        EXPECT_EQ(hunks[0].lines.size(), whole[0].lines.size()) << context;
        EXPECT_EQ(kl::unifiedDiff(a, b, "a", "b", context), kl::unifiedDiff(a, b, "a", "b", 10));
    }
    EXPECT_EQ(kl::diffHunks(a, b, 1).size(), 2u);
    EXPECT_THROW(kl::diffHunks(a, b, -5), kl::InputError);
}
