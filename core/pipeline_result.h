#pragma once
// What running a pipeline measured (the worker's pipeline op answers with it; `kloop pipeline run --json` writes it;
// the workbench's pipeline view reads it): per shape, the whole pipeline captured into one CUDA graph and run eager,
// both timed interleaved against the all-baseline pipeline, verified end to end against the chained references,
// and each stage alone (its time share, its check on the chained reference's inputs, whether it captures).
#include "core/evaluation.h"
#include "core/json_io.h"
#include "core/pipeline.h"

#include <optional>
#include <string>
#include <vector>

namespace kl {

struct PipelineStageResult {
    std::string stage;
    std::string problem;
    std::string impl; // StageImpl::describe()
    bool differsFromBaseline = false; // a candidate or the reference runs, not the pipeline's baseline
    Shape shape; // the stage problem's shape
    std::optional<TimingStats> graph; // the stage alone under graph replay
    std::optional<TimingStats> eager;
    std::optional<TimingStats> baselineGraph; // the stage's baseline, timed next to it
    std::optional<TimingStats> baselineEager;
    bool captured = true;
    std::string captureError;
    // The stage run on the chained reference's inputs against the reference's outputs (worst output).
    std::optional<CorrectnessStats> check;
    double share = 0; // of the sum of the stages' graph medians (judgePipeline)
};

// One implementation's error on one pipeline output against the chained fp64 references.
struct MeasuredError {
    double relL2 = 0;
    double maxAbs = 0;
    bool valid = false; // measured, finite and every element written
};

// One pipeline output's end-to-end budget at a shape (kernels/HARNESS.md, "Pipelines"), derived from the honest error
// measured on the same fresh inputs as the end-to-end checks (kl::pipelineTolerance).
struct PipelineOutputBudget {
    std::string output;
    Tolerance floor; // the producing problem's own tolerance for it: what its stage check uses
    MeasuredError fp32Chain; // the stages' fp32-accumulation references chained
    MeasuredError allBaseline; // the all-baseline pipeline
    Tolerance tolerance; // what the end-to-end checks judge this output against
    MeasuredError pipeline; // the pipeline's own error: the worse of its eager and graph checks
};

struct PipelineShapeResult {
    Shape shape;
    std::vector<PipelineStageResult> stages;
    std::optional<TimingStats> graph; // the whole pipeline, one CUDA graph
    std::optional<TimingStats> eager; // the same launches without a graph
    std::optional<TimingStats> baselineGraph; // the all-baseline pipeline, interleaved with the above
    std::optional<TimingStats> baselineEager;
    double speedup = 0; // paired graph ratios baseline / pipeline: median and 95% interval
    double speedupCiLow = 0;
    double speedupCiHigh = 0;
    double eagerSpeedup = 0; // paired eager ratios: median
    // End to end on fresh inputs (eager, graph), then the timed re-checks ("timed:<batch>"); worst output per check.
    std::vector<CorrectnessStats> checks;
    std::vector<PipelineOutputBudget> budgets; // per pipeline output, in the pipeline's order
    bool correct = false;
    int inputSets = 0; // rotating sets of every pipeline tensor (cold L2 like the harness's timing)
    double flops = 0; // the pipeline's formulas at this shape
    double bytes = 0;
    double mfu = 0; // flops / graph median / peak FLOP/s (judgePipeline)
    double mbu = 0;
};

struct PipelineResult {
    std::string pipeline;
    DeviceInfo device;
    PipelinePeaks peaks;
    std::vector<PipelineShapeResult> shapes;
    std::vector<VerdictReason> reasons;
    bool accepted = false;
};

// "out: rel_l2 0.0085 / max_abs 0.03 within 0.069 / 0.24 (honest: fp32 chain 0.0086 / 0.03, all-baseline ...;
// floor 0.0039 / 0.0156)": what a budget allowed and measured, for verdicts, `kloop pipeline run` and the workbench.
std::string describeBudget(const PipelineOutputBudget& b);
// Whether the pipeline's own error is within the budget.
bool withinBudget(const PipelineOutputBudget& b);

Json toJson(const PipelineResult& r);
PipelineResult pipelineResultFromJson(const Json& j, const std::string& where); // InputError naming the field

// Derives what follows from the measurements: each stage's time share, MFU/MBU, and the verdict with its reasons,
// each naming the stage: `pipeline.graph-capture-failed` (a stage or the whole pipeline could not be captured),
// `pipeline.eager-only-win` (a stage beats its baseline eager but not under the graph, or the pipeline does),
// `pipeline.stage-wrong`, `pipeline.end-to-end-wrong` (not for a timed re-check: the worker names those,
// `dynamic.timed-output-wrong`). Accepted: every shape correct and no blocking reason.
void judgePipeline(PipelineResult& r);

} // namespace kl
