#pragma once
// One place that turns an agent spec into an agent, for kloop run and the workbench:
//   tuner:<strategy>                  the built-in tuner (exhaustive, random, anneal, genetic, bayes)
//   llm:<provider>                    the LLM agent (settings from the session's extra map)
//   llm:<provider>+tuner:<strategy>   the LLM writes code; once a candidate of its is approved and measured,
//                                     the tuner searches that code's parameters before the LLM is asked again
#include "agent/llm/llm_agent.h"
#include "core/agent.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace kl {

struct AgentFactoryOptions {
    std::uint64_t seed = 1;
    std::map<std::string, std::string> extra; // the session's settings.extra (never secrets)
    LlmAgentHooks llmHooks;
};

// Throws InputError naming what is wrong with the spec.
std::unique_ptr<Agent> makeAgent(const std::string& spec, const AgentFactoryOptions& options = {});

} // namespace kl
