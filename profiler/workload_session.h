#pragma once
// A session whose objective is the model's time: seeded from a trace, its tuning shapes are the shapes the model ran
// the problem at, weighted by their share of its time. The CLI (`kloop session new --from-trace`) and the workbench
// ("Tune this") both create sessions here.
#include "profiler/workload.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace kl::prof {

struct TraceSessionRequest {
    std::filesystem::path dir; // the new session
    std::filesystem::path problemFolder; // the catalogue problem
    std::string tracePath;
    std::string id; // empty: from dir
    std::string agent;
    size_t maxShapes = 8;
};

struct TraceSession {
    std::string id;
    Problem problem; // as the session has it: its own copy, with the trace's tuning shapes
    std::vector<std::pair<std::string, std::string>> seeded; // candidate id, role
};

// Copies the problem into dir/problem with the workload's tuning shapes (held-out draws still span the whole
// validity range) and creates the session on it. Throws InputError when no shape of the trace fits the problem.
TraceSession createSessionFromWorkload(const Workload& w, const TraceSessionRequest& request);

} // namespace kl::prof
