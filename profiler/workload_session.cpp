#include "profiler/workload_session.h"

#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"

#include <fstream>
#include <sstream>

namespace kl::prof {

namespace fs = std::filesystem;

TraceSession createSessionFromWorkload(const Workload& w, const TraceSessionRequest& request)
{
    const fs::path from = request.problemFolder / "problem.json";
    Json j;
    {
        std::ifstream in(from);
        if (!in)
            throw InputError(from.string() + ": cannot open");
        try {
            j = Json::parse(in);
        } catch (const Json::exception& e) {
            throw InputError(from.string() + ": not valid JSON (" + e.what() + ")");
        }
    }
    const Problem catalogued = problemFromJson(j, from.string());
    const std::vector<Shape> shapes = tuningShapesFromWorkload(w, catalogued, request.tracePath, request.maxShapes);
    Json tuning = Json::array();
    for (const auto& s : shapes)
        tuning.push_back(toJson(s));
    j["tuning_shapes"] = tuning;
    j["tuning_shapes_from"] = request.tracePath;

    const fs::path folder = fs::absolute(request.dir) / "problem";
    TraceSession out;
    out.problem = problemFromJson(j, (folder / "problem.json").string());
    out.problem.folder = folder.string();

    Session header;
    header.id = request.id;
    header.problemName = out.problem.name;
    header.problemFolder = folder.string();
    header.settings.agent = request.agent;
    auto store = SessionStore::create(request.dir, header);
    out.id = header.id;
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec)
        throw InputError("cannot create " + folder.string() + ": " + ec.message());
    for (const auto& entry : fs::directory_iterator(request.problemFolder))
        if (entry.is_regular_file() && entry.path().filename() != "problem.json")
            fs::copy_file(entry.path(), folder / entry.path().filename(), fs::copy_options::overwrite_existing);
    writeFileAtomic(folder / "problem.json", j.dump(2) + "\n");
    for (auto& [id, role] : seedProblemCandidates(*store, out.problem, folder))
        out.seeded.emplace_back(id, role);
    return out;
}

} // namespace kl::prof
