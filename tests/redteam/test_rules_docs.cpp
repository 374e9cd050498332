// The design note and the agents' rules stay in step with the rule catalogue and the corpus.
#include "kernels/referee/referee.h"
#include "tests/redteam/corpus.h"
#include "tests/support/text_file.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <regex>
#include <sstream>

namespace {

std::string readText(const std::string& relative)
{
    return kl::test::readTextFile(std::string(KL_SOURCE_DIR) + "/" + relative);
}

TEST(RulesDocs, EveryRuleIsDocumentedForEngineersAndAgents)
{
    const std::string note = readText("kernels/REFEREE.md");
    const std::string rules = readText("context/rules/referee.md");
    ASSERT_FALSE(note.empty());
    ASSERT_FALSE(rules.empty());
    for (const auto& r : kl::referee::ruleCatalogue()) {
        EXPECT_NE(note.find("`" + r.id + "`"), std::string::npos) << r.id << " missing from kernels/REFEREE.md";
        EXPECT_NE(rules.find("`" + r.id + "`"), std::string::npos) << r.id << " missing from context/rules/referee.md";
    }
}

TEST(RulesDocs, AgentRulesApplyToEveryPrompt)
{
    const std::string rules = readText("context/rules/referee.md");
    ASSERT_EQ(rules.rfind("---\n", 0), 0u) << "front matter first";
    const auto end = rules.find("\n---\n", 4);
    ASSERT_NE(end, std::string::npos);
    const std::string front = rules.substr(0, end);
    EXPECT_NE(front.find("applies-to:\n  archs: [*]\n  tags: []"), std::string::npos) << front;
}

TEST(RulesDocs, CorpusFilesNamedInTheNoteExistAndAreInTheManifest)
{
    const std::string note = readText("kernels/REFEREE.md");
    std::set<std::string> manifest;
    for (const auto& c : kl::redteam::loadCorpus())
        manifest.insert(c.file);
    const std::regex file(R"(`((cheat|honest)/[a-z0-9_]+\.cu)`)");
    int named = 0;
    for (auto it = std::sregex_iterator(note.begin(), note.end(), file); it != std::sregex_iterator(); ++it) {
        const std::string path = "corpus/" + (*it)[1].str();
        EXPECT_TRUE(manifest.count(path)) << path << " is named in REFEREE.md but not in corpus.json";
        ++named;
    }
    EXPECT_GE(named, 20);
}

} // namespace
