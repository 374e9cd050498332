#pragma once
// The export of a pipeline (kernels/pipelines/<name>/pipeline.json) as one bundle. Each stage's kernel is written as
// the single-problem exporter writes it, under DIR/<stage>/ with the prefix kl_<pipeline>_<stage>: a candidate's
// whole bundle (dispatcher with its fallback, self-test, PyTorch op, manifest), or, for a stage without a candidate,
// the fallback part (the same C API, every shape on the fallback). Over them: the pipeline's entry point
// (include/kl_<pipeline>.h: the stages in order on the wired tensors, the intermediates carved from the caller's
// workspace), a PyTorch op for the whole pipeline, a GPU self-test against the all-fallback pipeline, a CMake
// project over everything and manifest.json naming each stage's source.
#include "core/pipeline.h"
#include "core/session.h"
#include "kernels/export/exporter.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kl::exporter {

// Where a stage's kernel comes from: `--stage STAGE=SESSION[:CANDIDATE]`, else the stage's impl in pipeline.json
// (a session's candidate, as `kloop pipeline run` runs it; baseline, library or reference: the fallback).
struct PipelineStageSource {
    std::string stage;
    std::filesystem::path session;
    std::string candidate; // empty: the session's accepted candidate with the best objective
    std::string flag; // what the user wrote ("--stage norm=runs/rms"), for errors
};

// "STAGE=SESSION[:CANDIDATE]" (CANDIDATE: after the last ':' when it is a candidate id). Throws InputError naming
// --stage.
PipelineStageSource parseStageSource(const std::string& text);

struct PipelineStageExport {
    std::string stage;
    std::string prefix; // kl_<pipeline>_<stage>
    std::string origin; // "--stage norm=runs/rms", "pipeline.json stages[0].impl", or why the fallback serves it
    std::shared_ptr<const Session> session; // with a candidate
    std::string sessionName; // the session directory's name (never a path of this machine)
    ExportPlan plan; // candidateId empty: the fallback serves every shape
    bool hasCandidate() const { return !plan.candidateId.empty(); }
};

struct PipelineExportPlan {
    std::string prefix; // kl_<pipeline>
    std::vector<PipelineStageExport> stages; // in run order
    std::vector<ExportRefusal> refusals; // the stages', each message naming its stage
    std::vector<std::string> warnings;
    DeviceInfo device; // the first candidate stage's session's: what every part builds for
    std::string cudaArch; // "90a"
};

// Resolves every stage's source and plans its export. Throws InputError naming the flag or file: a --stage naming no
// stage (or one stage twice), a missing or unreadable session, a session of another problem, an unknown or
// screened candidate. Refusals of a candidate (not accepted, flagged, ...) are collected, not thrown.
PipelineExportPlan planPipelineExport(
    const Pipeline& p, const std::vector<PipelineStageSource>& overrides, double minSpeedup = 1.0);

// Every file of the bundle, nothing written.
std::map<std::string, std::string> generatePipelineExport(
    const Pipeline& p, const PipelineExportPlan& plan, const ExportOptions& options);

struct PipelineExportResult {
    PipelineExportPlan plan;
    std::filesystem::path outDir;
    std::vector<std::string> files;
    bool forced = false;
};

// Plans, refuses (ExportRefused unless options.force) and writes as exportBundle does: into a staging folder swapped
// in at once, so on any error an existing DIR is left as it was.
PipelineExportResult exportPipeline(
    const Pipeline& p, const std::vector<PipelineStageSource>& overrides, const ExportOptions& options);

} // namespace kl::exporter
