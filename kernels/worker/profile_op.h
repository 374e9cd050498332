#pragma once
// The worker's "profile" op: a traced run of the baseline's and the candidate's launch plans on one shape (the
// trace op's path), and speed-of-light counters of one more run of each under CUPTI's range profiler. Only on
// request, never inside timing: tracing inflates launches and counter replay runs each kernel many times.
#include "kernels/plan_profile.h"
#include "kernels/worker/engine.h"

namespace kl::worker {

struct ProfileOpOptions {
    bool sol = true;
    bool trace = true;
    int launches = 5; // traced runs per plan
};

// The report's compile field is left for the caller (the op's compile report).
ProfileReport profilePlans(
    Engine& engine, const LoadedProblem& lp, const Plan& candidate, const Shape& s, const ProfileOpOptions& o);

// Why counters cannot be collected in this worker at all ("" when they may be): built without CUPTI, or CUPTI
// switched off with KL_NO_CUPTI.
std::string solUnavailableReason();

} // namespace kl::worker
