#pragma once
#include "core/candidate.h"
#include "core/candidate_tree.h"
#include "core/device.h"
#include "core/evaluation.h"
#include "core/problem.h"
#include "core/profile_summary.h"

#include <map>
#include <string>
#include <vector>

namespace kl {

struct Budget {
    int maxEvaluations = 0; // 0: unlimited
    double maxMinutes = 0; // 0: unlimited
    int convergenceWindow = 0; // stop after this many evaluations without an accepted improvement; 0: never
};

struct SessionSettings {
    std::string objective = "weighted-geomean-speedup";
    // "problem": a best candidate per regime of problem.json (one when it declares none); "single": one best over
    // every shape. A session.json written before regimes existed reads as "single", as it ran.
    std::string regimes = "problem";
    static bool isKnownRegimes(const std::string& v) { return v == "problem" || v == "single"; }
    std::string agent; // "tuner:anneal", "llm:openai", ...
    Budget budget;
    double reviewJumpFactor = 2.0; // a jump above this over the best goes to human review
    bool autoApproveLlm = false;
    std::map<std::string, std::string> extra; // provider settings by name (never secrets)
};

inline constexpr int kSessionSchemaVersion = 1;

struct Session {
    std::string id;
    std::string problemName;
    std::string problemFolder; // relative to the catalogue, or as given
    DeviceInfo device;
    SessionSettings settings;
    std::int64_t createdMs = 0;
    CandidateTree tree;
    std::map<HypothesisId, Hypothesis> hypotheses;
    std::map<CandidateId, Evaluation> evaluations;
    std::vector<ReviewDecision> reviews;
    std::map<CandidateId, CandidateProfile> profiles; // the latest profile of each profiled candidate
};

// The GPU model that measured an evaluation (a session's device for one recorded before pools named it): speedups
// compare only within one model.
inline const std::string& gpuModelOf(const Session& s, const Evaluation& e)
{
    return e.measuredOn.gpu.empty() ? s.device.name : e.measuredOn.gpu;
}

} // namespace kl
