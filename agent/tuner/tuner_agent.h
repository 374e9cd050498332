#pragma once
// The built-in tuner: an Agent that searches the declared parameters of the head candidate's source
// (or the problem's template when the tree is empty) with one of the search strategies.
#include "core/agent.h"

#include <cstdint>
#include <memory>
#include <string>

namespace kl {

struct TunerOptions {
    std::uint64_t seed = 1; // the same seed gives the same search on the same results
    std::size_t maxDeclaredSpace = 2'000'000;
};

// strategy: exhaustive | random | anneal | genetic | bayes (or the aliases in agent/tuner/strategy.h).
// Throws InputError on an unknown strategy.
std::unique_ptr<Agent> makeTunerAgent(const std::string& strategy, const TunerOptions& options = {});

// A tuner's cost for an evaluation: 1 / objective when correct, +infinity otherwise (lower is better).
double tunerCost(const Evaluation& e);

} // namespace kl
