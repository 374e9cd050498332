#pragma once
// The export of a session with a best candidate per shape regime (problem.json "regimes"): one dispatcher with an
// entry per regime. Each regime's winner is a bundle of its own (prefix kl_<problem>_<regime>, in the folder named
// after the regime) whose dispatch table is built from the winner's shapes inside its regime; the top-level C
// dispatcher (include/kl_<problem>_regimes.h) finds the shape's regime by its condition, then lets that bundle choose:
// its winner inside the boxes where it was verified and measured faster, the fallback everywhere else, and the
// fallback in a regime no candidate won.
#include "core/kernel_spec.h"
#include "core/problem.h"
#include "core/session.h"
#include "kernels/export/exporter.h"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kl::exporter {

struct RegimeEntry {
    Regime regime;
    std::optional<std::string> candidateId; // none: no candidate won the regime, its shapes go to the fallback
    ExportPlan plan; // with a winner: its plan, the dispatch table built from its shapes inside the regime
    std::optional<KernelSpec> spec; // the winner's, whose constraints its bundle checks before running it
    ParamValues params;
};

struct RegimeExportPlan {
    std::string prefix; // "kl_rmsnorm"
    std::vector<RegimeEntry> entries; // in the problem's order
    std::vector<ExportRefusal> refusals; // the entries', each message naming its regime
    std::vector<std::string> warnings;
    std::string fallbackDescription;
    std::vector<std::string> dims; // the problem's, in declaration order (the C dims struct)

    // What the generated kl_<problem>_regimes_select answers for s, computed with core's expression evaluator: the
    // index of the entry whose winner runs s (s in its regime, inside one of its boxes, valid for the problem and the
    // winner's constraints), or -1 for the fallback.
    int select(const Problem& problem, const Shape& s) const;
};

// Throws InputError when the problem declares no regimes or no regime of the session has a winner.
RegimeExportPlan planRegimeExport(const Session& session, const Problem& problem, double minSpeedup = 1.0);

// Every file of the export: each winner's bundle under <regime>/, the top-level dispatcher, its CMake project, its
// CPU dispatch test and manifest.json.
std::map<std::string, std::string> generateRegimeExport(
    const Session& session, const Problem& problem, const RegimeExportPlan& plan, const ExportOptions& options);

struct RegimeExportResult {
    RegimeExportPlan plan;
    std::filesystem::path outDir;
    std::vector<std::string> files;
    bool forced = false;
};

// Plans, refuses (ExportRefused, unless options.force) and writes, as exportBundle does for one candidate.
RegimeExportResult exportRegimes(const Session& session, const Problem& problem, const ExportOptions& options);

} // namespace kl::exporter
