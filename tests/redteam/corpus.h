#pragma once
// The red-team manifest (tests/redteam/corpus.json) and the problems its cases are written against.
#include "core/kernel_spec.h"
#include "core/problem.h"

#include <ostream>
#include <string>
#include <vector>

namespace kl::redteam {

struct CorpusCase {
    std::string file; // relative to tests/redteam
    std::string problem;
    bool cheat = false;
    std::string stage; // cheats: "static" (source rules), "ptx" (rules on the compiled PTX) or "dynamic"
    std::vector<std::string> expect; // cheats: acceptable rules, the intended one first
    std::vector<std::string> staticExpect; // ptx/dynamic cheats the source rules also catch (defence in depth)
    std::vector<std::string> ptxExpect; // dynamic cheats the PTX rules also catch
    // Dynamic cheats a defence may neutralize instead of catching (state poisoned before every launch): the
    // honest twin (an honest corpus file) it must then not beat by more than 10%.
    std::string neutralizedTwin;
    std::string note; // the hack class (cheats) or what makes it tricky (honest)
    std::string name() const; // file stem, a valid gtest name
    std::string source() const;
};
void PrintTo(const CorpusCase& c, std::ostream* os); // gtest prints the file, not the bytes

std::string redteamDir();
std::vector<CorpusCase> loadCorpus();

// The shipped problem (kernels/problems/<name>): the corpus is written against the real tensor and dim names.
Problem corpusProblem(const std::string& name);

// Launch arguments that name nothing the problem, the candidate's workspaces or its tensor maps declare.
std::vector<std::string> unknownLaunchArguments(const KernelSpec& spec, const Problem& problem);

} // namespace kl::redteam
