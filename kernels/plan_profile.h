#pragma once
// A traced and counter-profiled run of the problem's baseline and of a candidate on one shape (the worker's
// "profile" op): what ran (CUPTI kernel records of a few launches of each launch plan) and how close each kernel
// came to the hardware's speed of light (CUPTI range profiler: DRAM and SM throughput %, achieved occupancy).
// Never part of timing: tracing and counter replay perturb what they watch.
#include "core/evaluation.h"
#include "core/gpu_records.h"
#include "core/kernel_spec.h"
#include "core/problem.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kl {

class GpuEvaluator;
struct Candidate;

struct PlanProfile {
    std::string role; // "baseline" | "candidate"
    std::string label; // the plan's own description (e.g. "baseline.cu", "library:cublas_gemm_bf16")
    int launches = 0; // traced runs of the plan
    int kernelsPerRun = 0; // 0 when the trace is unavailable
    std::vector<KernelRecord> records; // launches * kernelsPerRun when traced
    std::vector<double> eventUs; // per traced run, CUDA events (also when CUPTI gives no records)
    bool solAvailable = false;
    std::string solNote; // why there are no counters (or a caveat when there are)
    int solPasses = 0;
    std::vector<SolCounters> sol; // one run of the plan, in launch order
};

// One kernel of one run of a plan: its launch ordinal's median over the traced runs, named as traced (else the
// counters' replayed duration and name), demangled; `sol` is its counters when there are any.
struct RunKernel {
    std::string name;
    double durationUs = -1;
    const SolCounters* sol = nullptr;
};
std::vector<RunKernel> kernelsOfOneRun(const PlanProfile& p);
// GPU time of one run: its kernels' durations summed, else (no records, no counters) the CUDA events' median.
double oneRunUs(const PlanProfile& p, const std::vector<RunKernel>& kernels);

struct ProfileReport {
    Shape shape;
    CompileReport compile; // the candidate's
    bool traceAvailable = false;
    std::string traceNote; // why there are no kernel records
    std::vector<PlanProfile> plans; // baseline first, then the candidate; empty when the candidate did not compile
    const PlanProfile* plan(const std::string& role) const;
};

struct ProfileRequest {
    bool sol = true;
    bool trace = true;
    int launches = 5; // traced runs per plan
    double timeoutSeconds = 300; // counter replay of a large shape takes seconds
};

// Compiles the candidate (locally, through the evaluator's cache), registers the problem with the worker and asks
// it for the profile op. Uses the evaluator's worker: not while evaluate() runs on another thread. Throws
// std::runtime_error when the worker cannot run it (no GPU, crash, timeout) and InputError for a shape that does not
// fit the problem.
ProfileReport profileAgainstBaseline(
    GpuEvaluator& evaluator, const Candidate& candidate, const Shape& shape, const ProfileRequest& request = {});

} // namespace kl
