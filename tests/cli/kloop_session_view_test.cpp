// `kloop session show` and `kloop session diff` on the recorded H200 session (resources/demo-session): what a
// candidate is shown as, and a tuner child's parameter change above its (empty) source diff.
#include "tests/support/kloop_process.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace kl::clitest;

namespace {

const fs::path kDemo = fs::path(KL_SOURCE_DIR) / "resources" / "demo-session";

fs::path scratchDir()
{
    const fs::path dir = fs::temp_directory_path()
        / ("kl_session_view_" + std::to_string(::getpid()) + "_"
            + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir);
    return dir;
}

std::string lineWith(const std::string& text, const std::string& needle)
{
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (line.find(needle) != std::string::npos)
            return line;
    return {};
}

} // namespace

TEST(KloopSessionShow, TheSeededBaselineIsShownAsBaselineNotRejected)
{
    const fs::path scratch = scratchDir();
    const ProcessResult r = runKloop({ "session", "show", kDemo.string() }, {}, scratch);
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const std::string root = lineWith(r.out, "c0001");
    ASSERT_FALSE(root.empty()) << r.out;
    EXPECT_NE(root.find(" baseline "), std::string::npos) << root;
    EXPECT_EQ(root.find("rejected"), std::string::npos) << root;
    EXPECT_EQ(root.find("not significantly faster"), std::string::npos) << root;
    // Everything else keeps its status.
    EXPECT_NE(lineWith(r.out, "c0003").find("rejected"), std::string::npos) << r.out;

    const ProcessResult j = runKloop({ "session", "show", kDemo.string(), "--json" }, {}, scratch);
    ASSERT_EQ(j.exitCode, 0) << j.err;
    const auto view = nlohmann::json::parse(j.out);
    const auto& first = view.at("candidates").at(0);
    EXPECT_EQ(first.at("id"), "c0001");
    EXPECT_EQ(first.at("display_state"), "baseline");
    EXPECT_EQ(first.at("status"), "rejected") << "the recorded status is unchanged";
    fs::remove_all(scratch);
}

TEST(KloopSessionDiff, ATunerChildShowsItsParameterChangeAboveTheSourceDiff)
{
    const fs::path scratch = scratchDir();
    // c0016 is c0007 with MINB 1 -> 2: same source.
    const ProcessResult r = runKloop({ "session", "diff", kDemo.string(), "c0016" }, {}, scratch);
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(r.out, "param MINB 1 -> 2\n(identical sources)\n");

    // Different sources: the parameter lines come first, then the unified diff.
    const ProcessResult d = runKloop({ "session", "diff", kDemo.string(), "c0001", "c0002" }, {}, scratch);
    ASSERT_EQ(d.exitCode, 0) << d.err;
    EXPECT_EQ(d.out.rfind("param CACHE (unset) -> 4\nparam MINB (unset) -> 1\n", 0), 0u) << d.out;
    const auto firstParam = d.out.find("param ");
    const auto diffStart = d.out.find("--- c0001/source.cu");
    ASSERT_NE(diffStart, std::string::npos) << d.out;
    EXPECT_LT(firstParam, diffStart);

    const ProcessResult j = runKloop({ "session", "diff", kDemo.string(), "c0007", "c0016", "--json" }, {}, scratch);
    ASSERT_EQ(j.exitCode, 0) << j.err;
    const auto view = nlohmann::json::parse(j.out);
    ASSERT_EQ(view.at("params").size(), 1u);
    EXPECT_EQ(view["params"][0].at("name"), "MINB");
    EXPECT_EQ(view["params"][0].at("old"), 1);
    EXPECT_EQ(view["params"][0].at("new"), 2);
    EXPECT_TRUE(view.at("hunks").empty());
    fs::remove_all(scratch);
}
