// The fuzz targets in CI: for each parser, a fixed number of deterministically mutated inputs from its seed corpus
// (the shipped problems, templates and traces plus tests/fuzz/corpus), within a time budget. A broken property
// fails the test and leaves the input in the build tree to replay (tests/fuzz/README.md).
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/mutator.h"
#include "tests/support/text_file.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <sstream>

namespace fs = std::filesystem;
using namespace kl::fuzz;

namespace {

const fs::path kRoot = KL_SOURCE_DIR;

std::vector<std::string> filesUnder(const fs::path& dir, const std::string& name = {}, const std::string& ext = {})
{
    std::vector<fs::path> paths;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_regular_file() && (name.empty() || it->path().filename() == name)
            && (ext.empty() || it->path().extension() == ext))
            paths.push_back(it->path());
    std::sort(paths.begin(), paths.end()); // the same order, so the same inputs, everywhere
    std::vector<std::string> out;
    for (const auto& p : paths)
        out.push_back(kl::test::readTextFile(p));
    return out;
}

std::vector<std::string> seedsFor(const std::string& target)
{
    std::vector<std::string> seeds = filesUnder(kRoot / "tests/fuzz/corpus" / target);
    auto add = [&](std::vector<std::string> more) { seeds.insert(seeds.end(), more.begin(), more.end()); };
    if (target == "annotations")
        add(filesUnder(kRoot / "kernels/problems", "", ".cu"));
    if (target == "problem_json")
        add(filesUnder(kRoot / "kernels/problems", "problem.json"));
    if (target == "traces") {
        for (auto s : filesUnder(kRoot / "tests/profiler/fuzz-corpus/chrome"))
            seeds.push_back(s.substr(1)); // the profiler corpus keeps a mode byte in front
    }
    return seeds;
}

std::vector<std::string> tokensFor(const std::string& target)
{
    std::vector<std::string> common
        = { "(", ")", "[", "]", "{", "}", ",", "\"", "\\", "\n", "//", "0", "-1", "1e308", "9223372036854775807", "-",
              "+", "*", "/0", "%", "?", ":", "&&", "||", "!", "<=", "T", "H", "\xff", std::string(1, '\0') };
    const std::map<std::string, std::vector<std::string>> extra = {
        { "expressions", { "min(", "ceil_div(", "next_pow2(", "pow(", "1.5", "BLOCK", ".", "e" } },
        { "annotations",
            { "// @kl:param ", "// @kl:constraint ", "// @kl:launch ", "// @kl:workspace ", " in [", "grid=(",
                "block=(", "args=(", "smem=", "bytes=", "__global__ void ", "/*", "*/", " @kl:" } },
        { "problem_json",
            { "\"dims\":", "\"name\":", "\"shape\":", "\"tensors\":", "\"weight\":", "null", "true", "1e400" } },
        { "llm_replies",
            { "```kl-candidate\n", "```kl-diff\n", "```\n", "NOTE: ", "--- a/candidate.cu\n", "+++ b/candidate.cu\n",
                "@@ -1,3 +1,4 @@\n", "+// @kl:constraint ", "-", " ", "// @kl:launch " } },
        { "traces",
            { "\"traceEvents\":", "\"ph\":\"X\"", "\"ts\":", "\"dur\":", "-1e12", "\"cat\":\"kernel\"",
                "\"pid\":", "null" } },
    };
    const auto& more = extra.at(target);
    common.insert(common.end(), more.begin(), more.end());
    return common;
}

int iterations()
{
    if (const char* env = std::getenv("KL_FUZZ_ITERATIONS"); env && *env)
        return std::max(1, std::atoi(env));
    return 3000;
}

void fuzz(const Target& target)
{
    const std::vector<std::string> seeds = seedsFor(target.name);
    ASSERT_GE(seeds.size(), 3u) << "seed corpus of " << target.name;
    Mutator mutator(0x6b6c6f6f70ULL, tokensFor(target.name));
    const auto budget = std::chrono::seconds(20);
    const auto start = std::chrono::steady_clock::now();
    int ran = 0;
    auto run = [&](const std::string& input) {
        try {
            target.check(input);
        } catch (const PropertyViolation& v) {
            const fs::path saved = fs::path(KL_BINARY_DIR) / ("fuzz-failure-" + std::string(target.name));
            std::ofstream(saved, std::ios::binary) << input;
            ADD_FAILURE() << target.name << ": " << v.what() << " (input kept in " << saved << ")";
            return false;
        } catch (const std::exception& e) {
            const fs::path saved = fs::path(KL_BINARY_DIR) / ("fuzz-failure-" + std::string(target.name));
            std::ofstream(saved, std::ios::binary) << input;
            ADD_FAILURE() << target.name << ": an unexpected exception escaped: " << e.what() << " (input kept in "
                          << saved << ")";
            return false;
        }
        ++ran;
        return true;
    };
    for (const auto& s : seeds)
        if (!run(s))
            return;
    const int n = iterations();
    for (int i = 0; i < n && std::chrono::steady_clock::now() - start < budget; ++i)
        if (!run(mutator.mutate(seeds[mutator.below(seeds.size())], seeds)))
            return;
    ::testing::Test::RecordProperty("inputs", ran);
    EXPECT_GE(ran, std::min<int>(n, 500)) << "too few inputs within the time budget";
}

} // namespace

TEST(Fuzz, Expressions)
{
    fuzz(targets()[0]);
}
TEST(Fuzz, Annotations)
{
    fuzz(targets()[1]);
}
TEST(Fuzz, ProblemJson)
{
    fuzz(targets()[2]);
}
TEST(Fuzz, LlmReplies)
{
    fuzz(targets()[3]);
}
TEST(Fuzz, Traces)
{
    fuzz(targets()[4]);
}
