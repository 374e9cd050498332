#pragma once
// The built-in tuner: an Agent that searches the declared parameters of the head candidate's source
// (or the problem's template when the tree is empty) with one of the search strategies.
#include "agent/tuner/multi_fidelity.h"
#include "core/agent.h"

#include <cstdint>
#include <memory>
#include <string>

namespace kl {

struct TunerOptions {
    std::uint64_t seed = 1; // the same seed gives the same search on the same results
    std::size_t maxDeclaredSpace = 2'000'000;
    // Set: multi-fidelity search (successive halving) over the strategy; screens first, the contenders promoted.
    std::optional<tuner::HalvingPlan> halving;
};

// strategy: exhaustive | random | anneal | genetic | bayes (or the aliases in agent/tuner/strategy.h), optionally
// followed by ":halving" (the default HalvingPlan) or ":halving=SAMPLESxSHAPES" (one screen rung of that many
// samples on that many tuning shapes), which sets options.halving. Throws InputError on an unknown strategy or a
// malformed suffix.
std::unique_ptr<Agent> makeTunerAgent(const std::string& strategy, const TunerOptions& options = {});

// A tuner's cost for an evaluation: 1 / objective when correct, +infinity otherwise (lower is better).
double tunerCost(const Evaluation& e);

} // namespace kl
