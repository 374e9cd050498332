#pragma once
// What the worker decides on the CPU before it runs a pipeline (kernels/HARNESS.md, "Pipelines"): one buffer per
// pipeline tensor (each pipeline input and each stage output, allocated once and shared by the stages that read
// it), each stage's problem tensors bound to those buffers, and how many rotating sets of them keep L2 cold the way
// the harness's timing does. No CUDA: unit-tested in CI.
#include "core/pipeline.h"
#include "core/pipeline_result.h"

#include <cstdint>
#include <map>
#include <vector>

namespace kl {

struct PipelineBuffer {
    TensorSource source; // a pipeline input or a stage output
    const TensorSpec* spec = nullptr; // as the describing stage's problem declares it (values, scale, dtype)
    Shape describingShape; // that stage's shape, for integer inputs whose values depend on it
    std::uint64_t elements = 0;
    std::uint64_t bytes = 0;
    bool pipelineInput = false;
    bool pipelineOutput = false;
};

struct PipelineStageBinding {
    Shape shape; // the stage problem's shape
    std::map<std::string, std::size_t> buffers; // each tensor of the stage problem -> its buffer
};

struct PipelineLayout {
    std::vector<PipelineBuffer> buffers; // inputs first, then each stage's outputs in stage order
    std::vector<PipelineStageBinding> stages; // parallel to the pipeline's stages
    std::uint64_t bytesPerSet = 0; // every buffer once
    std::size_t bufferOf(const TensorSource& s) const; // throws std::out_of_range
};

// The pipeline's buffers at a shape of it. Throws ExprError when a shape expression does not evaluate.
PipelineLayout planPipeline(const Pipeline& p, const Shape& shape);

// Sets of every buffer the timed loop rotates through: ceil(2 x L2 / bytes per set) + 1, at least 2, at most
// maxSets, fewer when `variants` copies of that many sets exceed the memory budget (never below 1).
int pipelineRotationSets(
    std::uint64_t bytesPerSet, std::int64_t l2Bytes, std::uint64_t budgetBytes, int variants, int maxSets = 64);

// One pipeline output's end-to-end tolerance (kernels/HARNESS.md, "Pipelines"), per metric: kMeasuredToleranceFactor
// x the honest error (the largest valid measurement: the fp32 references chained, the all-baseline pipeline, on the
// check's own inputs), never below `floor`, the producing problem's own tolerance for that output. Without a valid
// measurement, the floor: the stages' roundings are then unaccounted for, and the check errs towards rejecting.
Tolerance pipelineTolerance(const Tolerance& floor, const std::vector<MeasuredError>& honest);

} // namespace kl
