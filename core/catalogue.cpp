#include "core/catalogue.h"

#include "core/errors.h"
#include "core/json_io.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kl {

namespace {
    fs::path executableDir()
    {
        std::error_code ec;
        const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
        return ec ? fs::path() : exe.parent_path();
    }
} // namespace

fs::path dataRoot()
{
    if (const char* env = std::getenv("KL_DATA_DIR"); env && *env)
        return env;
    const fs::path installed = executableDir() / ".." / "share" / "kernelloop";
    std::error_code ec;
    if (fs::exists(installed / "context", ec))
        return fs::weakly_canonical(installed, ec);
    return KL_SOURCE_ROOT;
}

namespace {
    // $envVar (colon-separated), then the installed share folder, then the source tree: folders of `kind`.
    std::vector<fs::path> searchPath(const char* envVar, const char* kind)
    {
        std::vector<fs::path> path;
        if (const char* env = std::getenv(envVar); env && *env) {
            std::string s = env;
            std::size_t start = 0;
            while (start <= s.size()) {
                const std::size_t colon = s.find(':', start);
                const std::string part
                    = s.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
                if (!part.empty())
                    path.emplace_back(part);
                if (colon == std::string::npos)
                    break;
                start = colon + 1;
            }
        }
        path.push_back(dataRoot() / "kernels" / kind);
        path.push_back(fs::path(KL_SOURCE_ROOT) / "kernels" / kind);
        std::vector<fs::path> unique;
        std::set<std::string> seen;
        for (const auto& p : path)
            if (seen.insert(p.lexically_normal().string()).second)
                unique.push_back(p);
        return unique;
    }

    // Names of the folders of `path` holding `file`, sorted, first wins.
    std::vector<std::string> listFolders(const std::vector<fs::path>& path, const char* file)
    {
        std::set<std::string> names;
        for (const auto& dir : path) {
            std::error_code ec;
            for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
                if (it->is_directory() && fs::exists(it->path() / file))
                    names.insert(it->path().filename().string());
        }
        return { names.begin(), names.end() };
    }

    // kind: "problem" or "pipeline", whose folders hold kind + ".json".
    fs::path findFolder(const std::string& nameOrPath, const std::string& kind, const std::vector<fs::path>& path)
    {
        const std::string file = kind + ".json";
        std::error_code ec;
        if (nameOrPath.find('/') != std::string::npos) {
            if (fs::exists(fs::path(nameOrPath) / file, ec))
                return fs::absolute(nameOrPath, ec);
            throw InputError("no " + file + " in " + nameOrPath);
        }
        for (const auto& dir : path)
            if (fs::exists(dir / nameOrPath / file, ec))
                return dir / nameOrPath;
        std::string known;
        for (const auto& n : listFolders(path, file.c_str()))
            known += (known.empty() ? "" : ", ") + n;
        throw InputError("unknown " + kind + " '" + nameOrPath + "' (known: " + (known.empty() ? "none" : known) + ")");
    }
} // namespace

std::vector<fs::path> problemSearchPath()
{
    return searchPath("KL_PROBLEMS_DIR", "problems");
}

std::vector<std::string> listProblems()
{
    return listFolders(problemSearchPath(), "problem.json");
}

fs::path findProblemFolder(const std::string& nameOrPath)
{
    return findFolder(nameOrPath, "problem", problemSearchPath());
}

std::vector<fs::path> pipelineSearchPath()
{
    return searchPath("KL_PIPELINES_DIR", "pipelines");
}

std::vector<std::string> listPipelines()
{
    return listFolders(pipelineSearchPath(), "pipeline.json");
}

fs::path findPipelineFolder(const std::string& nameOrPath)
{
    return findFolder(nameOrPath, "pipeline", pipelineSearchPath());
}

std::vector<Problem> loadCatalogue(std::vector<std::string>* errors)
{
    std::vector<Problem> out;
    for (const auto& name : listProblems()) {
        try {
            out.push_back(loadProblem(findProblemFolder(name).string()));
        } catch (const InputError& e) {
            if (errors)
                errors->push_back(e.what());
        }
    }
    return out;
}

fs::path findSessionProblemFolder(const Session& s, const std::optional<std::string>& problemOption,
    const fs::path& sessionDir, std::vector<fs::path> roots)
{
    if (problemOption)
        return findProblemFolder(*problemOption);
    if (roots.empty())
        roots = problemSearchPath();
    std::vector<fs::path> tried;
    const auto has = [&](const fs::path& f) {
        if (std::find(tried.begin(), tried.end(), f) != tried.end())
            return false;
        tried.push_back(f);
        std::error_code ec;
        return fs::exists(f / "problem.json", ec);
    };
    const fs::path recorded = s.problemFolder;
    std::vector<fs::path> candidates;
    if (!recorded.empty()) {
        candidates.push_back(recorded);
        if (!sessionDir.empty() && recorded.is_relative())
            candidates.push_back(sessionDir / recorded);
    }
    if (!sessionDir.empty())
        candidates.push_back(sessionDir / "problem");
    for (const auto& root : roots) {
        if (!recorded.empty() && recorded.is_relative())
            candidates.push_back(root / recorded);
        if (!recorded.empty() && !recorded.filename().empty())
            candidates.push_back(root / recorded.filename());
        if (!s.problemName.empty())
            candidates.push_back(root / s.problemName);
    }
    for (const auto& c : candidates) {
        if (has(c)) {
            std::error_code ec;
            return fs::absolute(c, ec);
        }
    }
    std::string where;
    for (const auto& t : tried)
        where += (where.empty() ? "" : ", ") + t.string();
    throw InputError("problem '" + s.problemName + "' of session " + s.id + " not found (looked in: " + where
        + "); pass --problem NAME|DIR or add its folder to KL_PROBLEMS_DIR");
}

} // namespace kl
