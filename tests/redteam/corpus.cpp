#include "tests/redteam/corpus.h"

#include "core/errors.h"
#include "core/json_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kl::redteam {

std::string redteamDir()
{
    return std::string(KL_SOURCE_DIR) + "/tests/redteam";
}

std::string CorpusCase::name() const
{
    std::string stem = std::filesystem::path(file).stem().string();
    std::replace_if(
        stem.begin(), stem.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
    return stem;
}

std::string CorpusCase::source() const
{
    std::ifstream in(redteamDir() + "/" + file);
    if (!in)
        throw InputError("corpus file missing: " + file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<CorpusCase> loadCorpus()
{
    const std::string path = redteamDir() + "/corpus.json";
    std::ifstream in(path);
    if (!in)
        throw InputError(path + ": cannot open");
    const Json j = Json::parse(in);
    std::vector<CorpusCase> cases;
    for (const Json& c : j.at("cases")) {
        CorpusCase k;
        k.file = c.at("file").get<std::string>();
        k.problem = c.at("problem").get<std::string>();
        k.cheat = c.at("kind").get<std::string>() == "cheat";
        if (k.cheat) {
            k.stage = c.at("stage").get<std::string>();
            k.expect = c.at("expect").get<std::vector<std::string>>();
            k.note = c.at("hack").get<std::string>();
            if (c.contains("static_expect"))
                k.staticExpect = c.at("static_expect").get<std::vector<std::string>>();
            k.neutralizedTwin = c.value("neutralized_twin", std::string());
            if (c.contains("ptx_expect"))
                k.ptxExpect = c.at("ptx_expect").get<std::vector<std::string>>();
            if (k.stage != "static" && k.stage != "ptx" && k.stage != "dynamic")
                throw InputError(path + ": " + k.file + ": stage must be static, ptx or dynamic, not " + k.stage);
        } else {
            k.note = c.at("why").get<std::string>();
        }
        cases.push_back(std::move(k));
    }
    return cases;
}

Problem corpusProblem(const std::string& name)
{
    return loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/" + name);
}

void PrintTo(const CorpusCase& c, std::ostream* os)
{
    *os << c.file;
}

std::vector<std::string> unknownLaunchArguments(const KernelSpec& spec, const Problem& problem)
{
    std::vector<std::string> unknown;
    for (const LaunchStep& step : spec.launches) {
        for (const std::string& a : step.args) {
            const bool known = problem.tensor(a) || problem.dim(a)
                || std::any_of(
                    problem.scalars.begin(), problem.scalars.end(), [&](const ScalarSpec& s) { return s.name == a; })
                || std::any_of(
                    spec.workspaces.begin(), spec.workspaces.end(), [&](const WorkspaceSpec& w) { return w.name == a; })
                || (spec.tensorMap(a) && problem.tensor(spec.tensorMap(a)->tensor));
            if (!known)
                unknown.push_back(a);
        }
    }
    return unknown;
}

} // namespace kl::redteam
