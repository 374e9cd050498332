// The red-team corpus against the static rules (CI): every static cheat is caught with its expected rule
// and severity; every dynamic cheat and every honest candidate passes untouched (so the dynamic cheats
// really reach the GPU and honest wins are not flagged).
#include "core/json_io.h"
#include "kernels/referee/referee.h"
#include "tests/redteam/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <set>
#include <sstream>

namespace {

using kl::redteam::CorpusCase;

std::string describe(const std::vector<kl::VerdictReason>& rs)
{
    std::string s;
    for (const auto& r : rs)
        s += "  " + r.rule + " line " + std::to_string(r.line) + (r.blocking ? " [blocking]: " : " [review]: ")
            + r.message + "\n";
    return s.empty() ? "  (no reasons)\n" : s;
}

class CorpusStatic : public ::testing::TestWithParam<CorpusCase> { };

TEST_P(CorpusStatic, MeetsExpectation)
{
    const CorpusCase& c = GetParam();
    const kl::Problem problem = kl::redteam::corpusProblem(c.problem);
    const std::string source = c.source();
    const auto reasons = kl::referee::checkSource(source, problem);

    const std::vector<std::string>& expected = c.stage == "static" ? c.expect : c.staticExpect;
    if (c.cheat && !expected.empty()) {
        const auto hit = std::find_if(reasons.begin(), reasons.end(), [&](const kl::VerdictReason& r) {
            return std::find(expected.begin(), expected.end(), r.rule) != expected.end();
        });
        ASSERT_NE(hit, reasons.end()) << c.file << " (" << c.note << ") expected " << expected.front() << ", got:\n"
                                      << describe(reasons);
        const kl::referee::RuleInfo* info = kl::referee::findRule(hit->rule);
        ASSERT_NE(info, nullptr);
        EXPECT_EQ(hit->blocking, info->blocking) << hit->rule;
        EXPECT_GT(hit->line, 0) << "static reasons carry the line: " << hit->message;
        EXPECT_EQ(
            kl::referee::verdictFor(reasons), info->blocking ? kl::Verdict::Rejected : kl::Verdict::PendingReview);
    } else {
        EXPECT_TRUE(reasons.empty()) << c.file << " must pass the static rules untouched ("
                                     << (c.cheat ? "a dynamic case must reach the GPU" : "honest") << "), got:\n"
                                     << describe(reasons);
    }

    // Every case is a well-formed candidate for the problem it names (the harness would take it).
    if (c.file.find("include_reference") == std::string::npos) {
        const kl::KernelSpec spec = kl::parseKernelSpec(source);
        ASSERT_FALSE(spec.launches.empty());
        EXPECT_EQ(kl::redteam::unknownLaunchArguments(spec, problem), std::vector<std::string> {})
            << c.file << ": launch arguments must be tensors, dims or scalars of " << c.problem;
    }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusStatic, ::testing::ValuesIn(kl::redteam::loadCorpus()),
    [](const ::testing::TestParamInfo<CorpusCase>& param) { return param.param.name(); });

TEST(CorpusShape, SizeAndRuleCoverage)
{
    const auto cases = kl::redteam::loadCorpus();
    const auto cheats = std::count_if(cases.begin(), cases.end(), [](const CorpusCase& c) { return c.cheat; });
    EXPECT_GE(cheats, 15);
    EXPECT_GE(static_cast<long>(cases.size()) - cheats, 10);
    // Every static rule is proven by at least one corpus case.
    std::set<std::string> proven;
    for (const auto& c : cases)
        if (c.cheat)
            proven.insert(c.expect.begin(), c.expect.end());
    for (const auto& r : kl::referee::ruleCatalogue()) {
        if (r.stage == kl::referee::RuleStage::Static) {
            EXPECT_TRUE(proven.count(r.id)) << r.id << " has no corpus case";
        }
    }
    // Every expected rule exists.
    for (const auto& c : cases)
        for (const auto& e : c.expect)
            EXPECT_NE(kl::referee::findRule(e), nullptr) << c.file << ": unknown rule " << e;
    // A neutralized twin is an honest case of the same problem.
    for (const auto& c : cases) {
        if (c.neutralizedTwin.empty())
            continue;
        const auto twin = std::find_if(
            cases.begin(), cases.end(), [&](const CorpusCase& t) { return t.file == c.neutralizedTwin; });
        ASSERT_NE(twin, cases.end()) << c.file << ": twin " << c.neutralizedTwin << " not in the manifest";
        EXPECT_FALSE(twin->cheat) << c.neutralizedTwin;
        EXPECT_EQ(twin->problem, c.problem) << c.neutralizedTwin;
        EXPECT_EQ(c.stage, "dynamic") << c.file;
    }
    std::set<std::string> names;
    for (const auto& c : cases)
        EXPECT_TRUE(names.insert(c.name()).second) << "duplicate case name " << c.name();
}

} // namespace

namespace {

// The baseline and every CUDA template a session may start from: the portable one, the per-architecture ones
// (arch_templates) and the template*.cu files not yet named there.
std::set<std::string> shippedCandidateFiles(const std::filesystem::path& dir, const kl::Problem& problem)
{
    std::set<std::string> files { problem.baselineFile, problem.templateFile };
    for (const auto& [arch, file] : problem.archTemplates)
        files.insert(file);
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("template", 0) == 0 && entry.path().extension() == ".cu")
            files.insert(name);
    }
    return files;
}

// The shipped baselines and templates are what every session starts from: the referee must not flag them.
TEST(ShippedCandidates, PassTheStaticRulesUntouched)
{
    const std::filesystem::path problems = std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems";
    int checked = 0;
    for (const auto& dir : std::filesystem::directory_iterator(problems)) {
        if (!std::filesystem::exists(dir.path() / "problem.json"))
            continue;
        const kl::Problem problem = kl::loadProblem(dir.path().string());
        for (const std::string& file : shippedCandidateFiles(dir.path(), problem)) {
            std::ifstream in(dir.path() / file);
            if (!in)
                continue;
            std::stringstream ss;
            ss << in.rdbuf();
            const auto reasons = kl::referee::checkSource(ss.str(), problem);
            EXPECT_TRUE(reasons.empty()) << (dir.path() / file).string() << ":\n" << describe(reasons);
            ++checked;
        }
    }
    EXPECT_GE(checked, 6);
}

} // namespace
