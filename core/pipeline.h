#pragma once
// A pipeline is data: kernels/pipelines/<name>/pipeline.json names problems as ordered stages, maps its own dims
// onto each stage's dims and wires the stages' tensors (an output of one stage is an input of a later one). The
// whole pipeline is captured into one CUDA graph and timed end to end against the all-baseline pipeline; its
// reference is the stages' references chained (kernels/HARNESS.md, "Pipelines").
#include "core/json_io.h"

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kl {

// Which implementation of its problem a stage runs.
struct StageImpl {
    enum class Kind { Baseline, Library, Reference, Candidate };
    Kind kind = Kind::Baseline;
    std::string session; // Candidate: the session directory (relative: to the pipeline's folder)
    CandidateId candidate; // Candidate: its accepted candidate
    std::string describe() const; // "baseline", "candidate c0007 of runs/rms"
};
const char* stageImplKindName(StageImpl::Kind k);

// Where a tensor's data comes from: a pipeline input (stage empty) or an output of a stage.
struct TensorSource {
    std::string stage;
    std::string tensor;
    std::string text() const; // "x" or "norm.y", as pipeline.json writes it
    static TensorSource parse(const std::string& text); // "stage.tensor" or "input"
    bool operator==(const TensorSource& o) const { return stage == o.stage && tensor == o.tensor; }
};

struct PipelineStage {
    std::string name;
    std::string problemName;
    std::map<std::string, Expr> dims; // a stage problem's dim -> an expression over the pipeline's dims
    std::map<std::string, TensorSource> inputs; // each input tensor of the stage problem -> its source
    // Inputs read as a reshape of their source ({"from": ..., "reshape": true}): the same elements in row-major
    // order, so only the element counts must agree (attention's [T, HQ, D] output as the O-projection's [T, H]).
    std::set<std::string> reshaped;
    StageImpl impl;
    Problem problem; // the stage problem, resolved while parsing
    // The stage problem's shape at a pipeline shape (constants added). Throws ExprError.
    Shape shapeAt(const Shape& pipelineShape) const;
};

struct PipelineOutput {
    std::string name;
    TensorSource source; // always a stage output
};

// Measured peaks for MFU/MBU, with where they were measured.
struct PipelinePeaks {
    double flopsPerSecond = 0;
    double bytesPerSecond = 0;
    std::string source;
};

struct Pipeline {
    std::string name;
    std::string description;
    // The pipeline's own dims, constants, constraints, tuning and verify shapes and end-to-end FLOP/byte formulas,
    // in a problem's form (no tensors) so that its shapes are checked as a problem's are.
    Problem space;
    std::vector<std::string> inputs; // each described by the first stage that reads it
    std::vector<PipelineStage> stages; // in run order
    std::vector<PipelineOutput> outputs;
    PipelinePeaks peaks;
    std::string folder;

    const PipelineStage* stage(const std::string& name) const;
    // The index of a stage by name, or -1.
    int stageIndex(const std::string& name) const;
    // The spec of the tensor a source names: a stage output's, or a pipeline input's first reader's (nullptr when
    // nothing wires it).
    const TensorSpec* sourceSpec(const TensorSource& s) const;
    // The stage whose problem describes a source's tensor (its producer, or a pipeline input's first reader).
    const PipelineStage* describingStage(const TensorSource& s) const;
    // The source's extents at a pipeline shape. Throws ExprError.
    std::vector<std::int64_t> extentsAt(const TensorSource& s, const Shape& pipelineShape) const;
};

// Resolves a stage's problem by name; throws InputError when there is none.
using ProblemLookup = std::function<Problem(const std::string& name)>;
// The problem catalogue's lookup (findProblemFolder, loadProblem).
Problem catalogueProblem(const std::string& name);

// pipeline.json: parsed and validated (validatePipeline). Throws InputError naming where's field.
Pipeline pipelineFromJson(const Json& j, const std::string& where, const ProblemLookup& lookup);
Json toJson(const Pipeline& p);
// Reads folder/pipeline.json; throws InputError naming the file.
Pipeline loadPipeline(const std::filesystem::path& folder, const ProblemLookup& lookup = catalogueProblem);
// Every pipeline of the search path; one that fails to load is left out with its error in *errors.
std::vector<Pipeline> loadPipelines(std::vector<std::string>* errors = nullptr);

// The checks that span stages, at every tuning and verify shape: each stage's dims mapped and inside its problem's
// validity range; each stage input wired to a pipeline input or to an earlier stage's output of its dtype and
// extents; each pipeline input read; each output a stage output. Throws InputError naming where's field.
void validatePipeline(const Pipeline& p, const std::string& where);

} // namespace kl
