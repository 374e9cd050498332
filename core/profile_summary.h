#pragma once
// The profile of a candidate that reaches the agent's prompt and the workbench's bottleneck panel: the GPU
// worker's speed-of-light op on one shape, reduced to what a prompt needs (per kernel: time, DRAM and SM
// throughput, achieved occupancy) and its bottleneck class. The loop asks a Profiler for it whenever the best
// changes; kernels/ implements Profiler with the GPU worker, as it implements Evaluator.
#include "core/cancel.h"
#include "core/candidate.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kl {

struct ProfiledKernel {
    std::string name; // demangled
    double durationUs = -1; // median of the traced runs, else the counter replay's
    double dramPct = -1; // DRAM throughput, % of peak; -1: no counters
    double smPct = -1; // SM (compute) throughput, % of peak
    double occupancyPct = -1; // achieved occupancy, % of the SM's warps
};

struct CandidateProfile {
    CandidateId candidateId;
    std::string shape; // the profiled shape, e.g. "T=4096,H=8192"
    double candidateUs = -1; // GPU time of one run of the candidate
    double baselineUs = -1; // of the problem's baseline on the same shape
    std::vector<ProfiledKernel> kernels; // the candidate's, in launch order
    std::string note; // why there are no counters, or a caveat
};

// The class of a kernel from its DRAM and SM throughput in % of peak (Nsight Compute's speed-of-light rule):
// balanced | memory-bound | compute-bound | latency-bound (both pipes low and close) | unknown (no counters).
std::string rooflineClass(double dramPct, double smPct);
// What limits a kernel of that class, and what would move it, in one sentence.
std::string boundAdvice(const std::string& bound, double dramPct, double smPct, double occupancyPct);
// The longest kernel: its class is the candidate's. nullptr when there are none.
const ProfiledKernel* dominantKernel(const CandidateProfile& p);
// The text the agent's prompt carries and the bottleneck panel shows: figures first, then bound and advice.
std::string bottleneckSummary(const CandidateProfile& p);

nlohmann::json toJson(const CandidateProfile& p);
CandidateProfile candidateProfileFromJson(const nlohmann::json& j, const std::string& where); // throws InputError

class Profiler {
public:
    virtual ~Profiler() = default;
    // Called on the loop's device thread, never while evaluate() runs. Throws when the device cannot run it.
    virtual CandidateProfile profile(const Candidate& c, const CancelToken& cancel) = 0;
};

} // namespace kl
