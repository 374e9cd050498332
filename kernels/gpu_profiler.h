#pragma once
// core's Profiler on the GPU worker: the worker's speed-of-light op (profileAgainstBaseline) on the problem's
// largest tuning shape, reduced to the CandidateProfile the agent's prompt carries.
#include "core/profile_summary.h"
#include "kernels/plan_profile.h"

namespace kl {

class GpuEvaluator;

class GpuProfiler final : public Profiler {
public:
    explicit GpuProfiler(GpuEvaluator& evaluator, ProfileRequest request = {});
    CandidateProfile profile(const Candidate& c, const CancelToken& cancel) override;

private:
    GpuEvaluator& m_evaluator;
    ProfileRequest m_request;
};

// The largest tuning shape: counters of short kernels are noise, and it is the one most bound by hardware.
Shape largestTuningShape(const Problem& problem); // throws InputError when the problem has none
// The candidate plan's kernels (traced medians, counters of one run) and both plans' GPU time.
CandidateProfile candidateProfileFrom(const ProfileReport& report, const CandidateId& id);

} // namespace kl
