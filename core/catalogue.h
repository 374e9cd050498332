#pragma once
// Where problems are found: $KL_PROBLEMS_DIR, then the installed share folder, then the source tree
// this binary was built from (so a fresh checkout works without installing).
#include "core/problem.h"
#include "core/session.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kl {

std::vector<std::filesystem::path> problemSearchPath();
// Names of the problems in the search path (folders holding problem.json), sorted, first wins.
std::vector<std::string> listProblems();
// Every problem of the search path, loaded; one that fails to load is left out with its error in *errors.
std::vector<Problem> loadCatalogue(std::vector<std::string>* errors = nullptr);
// The folder of a problem given by name or by path; throws InputError when there is none.
std::filesystem::path findProblemFolder(const std::string& nameOrPath);
// Pipelines (kernels/pipelines/<name>/pipeline.json) are found the same way, $KL_PIPELINES_DIR first.
std::vector<std::filesystem::path> pipelineSearchPath();
std::vector<std::string> listPipelines();
std::filesystem::path findPipelineFolder(const std::string& nameOrPath);
// The folder of a session's problem, the one lookup every command and the workbench use: `problemOption`
// (--problem NAME|DIR) wins; else the recorded folder (as recorded, then inside `sessionDir`), then
// `sessionDir`/problem, then the recorded folder's name and the problem's name in each of `roots` (the search path
// when empty). Returns an absolute path; throws InputError naming every place looked and the --problem flag.
std::filesystem::path findSessionProblemFolder(const Session& s, const std::optional<std::string>& problemOption = {},
    const std::filesystem::path& sessionDir = {}, std::vector<std::filesystem::path> roots = {});
// The repository's own folder for bundled data (context/, resources/): $KL_DATA_DIR or the source tree.
std::filesystem::path dataRoot();

} // namespace kl
