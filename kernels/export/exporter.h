#pragma once
// Exports a session's winning kernel as a self-contained bundle: the kernel with its parameters baked in,
// a plain CUDA C++ launcher with a C API, a dispatcher that uses the kernel only in the shape ranges where it
// was verified and measured faster (the fallback elsewhere), a PyTorch wrapper, a CMake project with a
// self-test, and manifest.json with provenance and the sha256 of every file. Generating needs no GPU and no
// CUDA runtime; the bundle is text.
#include "core/json_io.h"
#include "core/problem.h"
#include "core/session.h"
#include "kernels/export/dispatch_plan.h"

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kl::exporter {

struct ExportOptions {
    std::string candidateId; // empty: the accepted candidate with the best objective
    std::filesystem::path outDir;
    bool force = false; // export despite refusals; the reasons go loudly into manifest and headers
    bool overwrite = false; // replace an existing non-empty outDir
    double minSpeedup = 1.0; // lower CI end a shape must clear to dispatch to the candidate
    // Values that must never reach a bundle (API keys, ...), in addition to the environment's
    // KEY/TOKEN/SECRET/PASSWORD variables, which are always scrubbed.
    std::vector<std::string> secrets;
};

// Why a candidate may not be exported: each refusal says what and why.
struct ExportRefusal {
    std::string code; // "pending-review", "flagged", "not-accepted", "incorrect-shape", "range-not-covered", ...
    std::string message;
};

// Everything decided before a file is written; the GUI shows it before asking to export.
struct ExportPlan {
    std::string candidateId;
    std::vector<ExportRefusal> refusals; // empty: safe to export
    std::vector<std::string> warnings; // exported anyway, written into the manifest
    DispatchPlan dispatch;
    double minSpeedup = 1.0; // lower CI end a shape had to clear to count as faster
    bool usesLibraryFallback = false; // e.g. cuBLAS for gemm_bf16
    std::string fallbackDescription;
    std::string prefix {}; // of the C API's names ("kl_rmsnorm_decode" for a regime's bundle); empty: kl_<problem>
    std::string regime {}; // the regime whose shapes the dispatch table was built from; empty: every shape
};

class ExportRefused : public std::runtime_error {
public:
    ExportRefused(const std::string& what, std::vector<ExportRefusal> refusals)
        : std::runtime_error(what)
        , m_refusals(std::move(refusals))
    {
    }
    const std::vector<ExportRefusal>& refusals() const { return m_refusals; }

private:
    std::vector<ExportRefusal> m_refusals;
};

struct ExportResult {
    ExportPlan plan;
    std::filesystem::path outDir;
    std::map<std::string, std::string> fileSha256; // bundle-relative path -> sha256 (manifest.json excluded)
    std::vector<std::string> files; // bundle-relative paths, manifest.json included
    bool forced = false;
};

// The refusals as manifests and `--json` write them: [{"code", "message"}].
Json refusalsJson(const std::vector<ExportRefusal>& refusals);
// One "  - code: message" line per refusal.
std::string refusalLines(const std::vector<ExportRefusal>& refusals);
// Throws ExportRefused ("refusing to export WHAT:", each refusal, what --force would write them into) when there are
// refusals and not force.
void refuseUnlessForced(const std::string& what, const std::vector<ExportRefusal>& refusals, bool force,
    const std::string& forceWritesInto);

// "kl_<problem>" in lower case: the prefix of a bundle's C API.
std::string bundlePrefix(const Problem& problem);

// The architecture a bundle builds for ("90a"): the device's, or sm_90a with a warning when it records none.
std::string bundleCudaArch(const DeviceInfo& device, std::vector<std::string>& warnings);

// The default candidate: the Accepted one with an evaluation and the highest objective (with anyStatus, when
// none is accepted, the evaluated one with the highest objective, for a forced export). Throws InputError
// when there is none.
std::string defaultCandidate(const Session& session, bool anyStatus = false);

// Throws InputError when the candidate's evaluation was only a screen (multi-fidelity search): never exported, not
// even with force.
void refuseScreened(const Session& session, const std::string& candidateId);

// Checks and the dispatch table; throws InputError for an unknown candidate or an unreadable source. With a regime,
// the dispatch table is built from the candidate's shapes inside it (each box lies among the regime's shapes); the
// checks still cover every shape it was verified on.
ExportPlan planExport(const Session& session, const Problem& problem, const std::string& candidateId,
    double minSpeedup = 1.0, const Regime* regime = nullptr);

// Plans and writes the bundle. Throws ExportRefused when the plan has refusals and !force, InputError when
// outDir exists and is not empty without overwrite, or when a file would carry a secret or an absolute path.
ExportResult exportBundle(const Session& session, const Problem& problem, const ExportOptions& options);

// The bundle's files as exportBundle writes them: scrubbed of options.secrets and of the problem's and outDir's paths.
std::map<std::string, std::string> generateBundleFor(
    const Session& session, const Problem& problem, const ExportPlan& plan, bool forced, const ExportOptions& options);
// The plan of a bundle without a candidate (a pipeline stage that runs its fallback): every shape goes to the
// problem's fallback, as a candidate's bundle sends the shapes outside its boxes.
ExportPlan planFallbackExport(const Problem& problem, const std::string& prefix);
// Its files: the C API, dispatcher, fallback and entry point of a candidate's bundle (the candidate declining every
// shape), a CMake library without tests; built for device's architecture, scrubbed as generateBundleFor scrubs.
std::map<std::string, std::string> generateFallbackBundleFor(
    const Problem& problem, const ExportPlan& plan, const DeviceInfo& device, const ExportOptions& options);
// Writes files into options.outDir, as exportBundle does: refuses a non-empty directory without overwrite or one that
// is not an earlier export, and any file that would carry a secret or a private path. Returns the absolute directory.
std::filesystem::path writeExport(
    const std::map<std::string, std::string>& files, const Problem& problem, const ExportOptions& options);

// Generates the bundle in memory: bundle-relative path -> content (manifest.json included). Used by
// exportBundle and by tests.
std::map<std::string, std::string> generateBundle(
    const Session& session, const Problem& problem, const ExportPlan& plan, bool forced);

// What in `content` looks like a secret or a path of the user's machine; empty when clean.
std::vector<std::string> findLeaks(
    const std::string& content, const std::vector<std::string>& secrets, const std::vector<std::string>& privatePaths);

} // namespace kl::exporter
