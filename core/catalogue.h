#pragma once
// Where problems are found: $KL_PROBLEMS_DIR, then the installed share folder, then the source tree
// this binary was built from (so a fresh checkout works without installing).
#include "core/problem.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kl {

std::vector<std::filesystem::path> problemSearchPath();
// Names of the problems in the search path (folders holding problem.json), sorted, first wins.
std::vector<std::string> listProblems();
// The folder of a problem given by name or by path; throws InputError when there is none.
std::filesystem::path findProblemFolder(const std::string& nameOrPath);
// The repository's own folder for bundled data (context/, resources/): $KL_DATA_DIR or the source tree.
std::filesystem::path dataRoot();

} // namespace kl
