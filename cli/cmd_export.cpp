// kloop export: a session's winning kernel as a bundle (kernel, launcher, dispatcher with fallback, PyTorch op,
// CMake project, self-test, manifest).
#include "cli/command.h"
#include "cli/flashinfer_bench_export.h"
#include "core/catalogue.h"
#include "core/current_best.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"
#include "kernels/export/exporter.h"
#include "kernels/export/regime_export.h"

#include <filesystem>
#include <iostream>

namespace fs = std::filesystem;

namespace kl::cli {
namespace {

    int printRegimeExport(const Session& s, const exporter::RegimeExportResult& r, bool json)
    {
        if (json) {
            Json j { { "out", r.outDir.string() }, { "forced", r.forced }, { "files", r.files },
                { "warnings", r.plan.warnings }, { "fallback", r.plan.fallbackDescription } };
            j["refusals"] = exporter::refusalsJson(r.plan.refusals);
            j["regimes"] = Json::array();
            for (const auto& e : r.plan.entries) {
                Json regions = Json::array();
                for (const auto& reg : e.plan.dispatch.candidateRegions)
                    regions.push_back(reg.label(e.plan.dispatch.dims));
                j["regimes"].push_back({ { "name", e.regime.name }, { "condition", e.regime.condition.text() },
                    { "candidate", e.candidateId ? Json(*e.candidateId) : Json() }, { "candidate_regions", regions } });
            }
            std::cout << j.dump(2) << "\n";
            return kExitOk;
        }
        if (r.forced) {
            std::cerr << "WARNING: FORCED EXPORT despite:\n" << exporter::refusalLines(r.plan.refusals);
        }
        std::cout << "exported the regime winners of session " << s.id << " to " << r.outDir.string() << " ("
                  << r.files.size() << " files)\ndispatch:\n";
        for (const auto& e : r.plan.entries) {
            std::cout << "  regime " << e.regime.name << " (" << e.regime.condition.text() << "): ";
            if (!e.candidateId) {
                std::cout << "no winner, fallback\n";
                continue;
            }
            std::cout << "candidate " << *e.candidateId << "\n";
            for (const auto& reg : e.plan.dispatch.candidateRegions)
                std::cout << "    candidate  " << reg.label(e.plan.dispatch.dims) << "  (" << reg.wins
                          << " shapes faster, " << reg.minSpeedup << "x .. " << reg.maxSpeedup << "x)\n";
        }
        std::cout << "  fallback   everywhere else: " << r.plan.fallbackDescription << "\n";
        for (const auto& w : r.plan.warnings)
            std::cout << "warning: " << w << "\n";
        std::cout << "build and self-test: cmake -S " << r.outDir.string()
                  << " -B build && cmake --build build && ctest --test-dir build\n";
        return kExitOk;
    }

    int runExport(const Args& a)
    {
        const auto out = a.option("out");
        if (a.positionals().size() != 1 || !out) {
            std::cerr << "usage: kloop export SESSION [--candidate ID] --out DIR [--force] [--overwrite] [--problem "
                         "NAME|DIR] "
                         "[--min-speedup X] [--format bundle|flashinfer-bench] [--json]\n";
            return kExitUsage;
        }
        const std::string format = a.optionOr("format", "bundle");
        if (format != "bundle" && format != "flashinfer-bench")
            throw UsageError("--format is bundle or flashinfer-bench, got '" + format + "'");
        if (format == "flashinfer-bench" && a.has("force"))
            throw UsageError("--force is for bundles: a FlashInfer-Bench solution is written only for a candidate that "
                             "exports without it");
        const bool json = a.has("json");
        const double minSpeedup = a.real("min-speedup", 1.0, 0, 1e6);
        try {
            LoadReport report;
            const Session s = SessionStore::load(a.positionals()[0], &report);
            for (const auto& w : report.warnings)
                std::cerr << "warning: " << w << "\n";
            const Problem problem
                = loadProblem(findSessionProblemFolder(s, a.option("problem"), a.positionals()[0]).string());
            if (format == "flashinfer-bench")
                return runFlashInferBenchExport(s, problem, a);
            exporter::ExportOptions o;
            o.outDir = *out;
            o.candidateId = a.optionOr("candidate", "");
            o.force = a.has("force");
            o.overwrite = a.has("overwrite");
            o.minSpeedup = minSpeedup;
            if (o.candidateId.empty() && !problem.regimes.empty() && !regimeWinners(s).empty())
                return printRegimeExport(s, exporter::exportRegimes(s, problem, o), json);
            const exporter::ExportResult r = exporter::exportBundle(s, problem, o);
            const auto& d = r.plan.dispatch;
            if (json) {
                Json j { { "out", r.outDir.string() }, { "candidate", r.plan.candidateId }, { "forced", r.forced },
                    { "files", r.files } };
                j["warnings"] = r.plan.warnings;
                j["refusals"] = exporter::refusalsJson(r.plan.refusals);
                j["candidate_regions"] = Json::array();
                for (const auto& reg : d.candidateRegions)
                    j["candidate_regions"].push_back(reg.label(d.dims));
                j["fallback"] = r.plan.fallbackDescription;
                std::cout << j.dump(2) << "\n";
            } else {
                if (r.forced) {
                    std::cerr << "WARNING: FORCED EXPORT of candidate " << r.plan.candidateId << " despite:\n"
                              << exporter::refusalLines(r.plan.refusals);
                }
                std::cout << "exported candidate " << r.plan.candidateId << " of session " << s.id << " to "
                          << r.outDir.string() << " (" << r.files.size() << " files)\n";
                std::cout << "dispatch:\n";
                for (const auto& reg : d.candidateRegions)
                    std::cout << "  candidate  " << reg.label(d.dims) << "  (" << reg.wins << " shapes faster, "
                              << reg.minSpeedup << "x .. " << reg.maxSpeedup << "x)\n";
                for (const auto& reg : d.lossRegions)
                    std::cout << "  fallback   " << reg.label(d.dims) << "  (not faster there)\n";
                std::cout << "  fallback   everywhere else: " << r.plan.fallbackDescription << "\n";
                for (const auto& w : r.plan.warnings)
                    std::cout << "warning: " << w << "\n";
                std::cout << "build and self-test: cmake -S " << r.outDir.string()
                          << " -B build && cmake --build build && ctest "
                          << "--test-dir build\n";
            }
            return kExitOk;
        } catch (const exporter::ExportRefused& e) {
            if (json) {
                std::cout << Json { { "refused", true }, { "refusals", exporter::refusalsJson(e.refusals()) } }.dump(2)
                          << "\n";
            }
            std::cerr << "kloop export: " << e.what() << "\n";
            return kExitFailure;
        } catch (const std::exception& e) {
            std::cerr << "kloop export: " << e.what() << "\n";
            return kExitFailure;
        }
    }

    const CommandRegistration reg { { "export",
        "export a session's winning kernel as a bundle with dispatch, fallback and provenance",
        "kloop export SESSION [--candidate ID] --out DIR [--force] [--overwrite] [--problem NAME|DIR] [--min-speedup "
        "X] [--format bundle|flashinfer-bench] [--json]\n"
        "Writes the kernel with its parameters baked in, a CUDA runtime launcher with a C API, a dispatcher that uses "
        "the\n"
        "kernel only in the shape ranges where it was verified and measured faster (the problem's library baseline or\n"
        "reference kernel elsewhere), a PyTorch op, a CMake project with a self-test, and manifest.json.\n"
        "Refuses candidates that are pending review, flagged, not accepted or not verified on their whole range;\n"
        "--force exports anyway and writes the reasons into the manifest and headers. An existing non-empty DIR needs\n"
        "--overwrite (and must be an earlier bundle). Default candidate: the accepted one with the best objective.\n"
        "A session with a best per shape regime (problem.json \"regimes\") exports, without --candidate, a dispatcher\n"
        "with one entry per regime: each winner's bundle under DIR/<regime>/, used inside the boxes of its regime "
        "where\n"
        "it was measured faster, and the fallback everywhere else (include/kl_<problem>_regimes.h).\n"
        "--format flashinfer-bench writes the candidate as a FlashInfer-Bench Solution and one Trace per timed shape\n"
        "into DIR's TraceSet folders (solutions/, traces/, and definitions/ for a problem from `kloop problems "
        "import`),\n"
        "refusing what a bundle refuses.",
        { "json", "force", "overwrite" }, { "out", "candidate", "problem", "min-speedup", "format" }, &runExport } };

} // namespace
} // namespace kl::cli
