#pragma once
// What a trace says about the model it profiled: its GPU time by operation, the catalogue problems that fit those
// operations (problem.json "trace_match") at the shapes the model ran them, its phases named by their own content,
// and, for a session's best candidate, the end-to-end saving it projects.
#include "core/evaluation.h"
#include "core/problem.h"
#include "profiler/analysis.h"
#include "profiler/trace.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kl::prof {

// One shape of a tunable operation, with the work the problem's formulas give it.
struct WorkloadShape {
    Shape shape; // the problem's dims, constants included
    uint64_t calls = 0;
    int64_t gpuNs = 0;
    int64_t launchBoundNs = 0; // of gpuNs, inside launch-bound phases (a faster kernel there saves no wall time)
    double share = 0; // of all GPU work in the trace
    std::string outside; // why the shape is outside the problem's validity range; empty when it fits
    double flopsPerCall = 0;
    double bytesPerCall = 0;
};

// The operations of the trace that one catalogue problem fits.
struct TunableOp {
    std::string problem;
    std::string rule; // the trace_match rule that found them ("module *RMSNorm")
    std::string opClass;
    uint64_t calls = 0;
    int64_t gpuNs = 0;
    int64_t fittingNs = 0; // at shapes inside the validity range
    double share = 0;
    std::vector<WorkloadShape> shapes; // most time first
};

// All GPU work, by the operation that launched it.
struct OpGroup {
    std::string name; // the problem, or "aten::mul in LlamaAttention", or "(no launch record)"
    std::string opClass; // norm | softmax | activation | gemm | attention | elementwise | copy | other
    std::string problem; // the catalogue problem that fits, if any
    uint64_t kernels = 0;
    int64_t gpuNs = 0;
    double share = 0;
};

// Consecutive top-level calls (a model's forward passes, outermost ranges) of the same kind, classed by what they
// contain.
struct WorkloadPhase {
    std::string label; // "LlamaForCausalLM x24"
    std::string bound; // compute-bound | memory-bound | launch-bound | mixed
    std::string dominant; // "gemm 71%"
    std::string target; // what a hypothesis could aim at
    uint64_t calls = 0;
    uint64_t kernels = 0;
    int64_t startNs = 0;
    int64_t endNs = 0;
    int64_t gpuNs = 0;
    double busyPct = 0; // kernel time over the phase's GPU window
};

struct Workload {
    int64_t gpuNs = 0; // all GPU work
    int64_t windowNs = 0; // first GPU work start .. last end
    int64_t tunableNs = 0; // at shapes a problem fits
    uint64_t opsWithShapes = 0; // ops the profiler recorded inputs for (0: record without record_shapes)
    std::vector<TunableOp> tunable;
    std::vector<OpGroup> groups;
    std::vector<WorkloadPhase> phases;
    std::vector<std::string> notes;

    const TunableOp* tunableFor(const std::string& problem) const;
};

struct WorkloadOptions {
    Ceilings ceilings; // empty device: from the trace's device name
    size_t topGroups = 16;
    double launchBoundBusy = 0.5; // a phase whose GPU is busy less than this is launch-bound
};

Workload analyzeWorkload(const Trace& trace, const std::vector<Problem>& catalogue, const WorkloadOptions& opts = {});

// A session's tuning shapes from the trace: the problem's shapes inside its validity range, weighted by their share
// of its time (most first, at most maxShapes). Throws InputError saying why when none fits.
std::vector<Shape> tuningShapesFromWorkload(
    const Workload& w, const Problem& problem, const std::string& tracePath, size_t maxShapes = 8);

// Amdahl, per shape: a candidate's measured speedups applied to the time the trace spent at each shape. Shapes the
// candidate was not measured at keep their time.
struct ProjectedShape {
    Shape shape;
    int64_t gpuNs = 0;
    double speedup = 1; // 1 when not measured
    bool measured = false;
    int64_t savedNs = 0;
};

struct Projection {
    std::string problem;
    std::string candidate;
    int64_t opNs = 0; // the problem's time in the trace
    int64_t savedNs = 0; // all of it, launch-bound phases included
    int64_t savedOutsideLaunchBoundNs = 0; // what shortens the run
    double kernelSavingPct = 0; // of all GPU work
    double endToEndPct = 0; // of the GPU window: savedOutsideLaunchBoundNs / windowNs
    double upperBoundPct = 0; // savedNs / windowNs
    std::vector<ProjectedShape> shapes;
};

Projection projectGain(const Workload& w, const std::string& problem, const std::string& candidate,
    const std::vector<ShapeResult>& measured);

nlohmann::json toJson(const Workload& w);
nlohmann::json toJson(const Projection& p);
std::string toText(const Workload& w); // the tunable operations and phases, for `kloop trace analyze`
std::string toText(const Projection& p);

} // namespace kl::prof
