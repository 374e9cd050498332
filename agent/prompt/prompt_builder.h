#pragma once
// Builds the prompt for the LLM agent in a fixed order, so prompts are comparable across calls and
// the stable part (system: role, rules, device, model facts, protocol) can be cached by providers:
//
//   system: 1 role and rules   2 context/rules/*.md   3 device facts (by architecture)
//           4 model-architecture facts (by problem tags)   5 other notes   6 reply protocol
//   user:   7 problem spec (signature, dims and validity range, timing shapes; never held-out shapes
//             or seeds)   8 reference semantics   9 current candidate with per-shape measurements and
//             the profiler's bottleneck summary   10 recent failed attempts with referee reasons
//           11 the engineer's hypothesis and the task
#include "agent/prompt/context_loader.h"
#include "core/agent.h"
#include "core/candidate.h"
#include "core/device.h"
#include "core/evaluation.h"
#include "core/kernel_spec.h"
#include "core/problem.h"

#include <optional>
#include <string>
#include <vector>

namespace kl::prompt {

struct FailedAttempt {
    std::string label; // "c0012" or "reply 2 of call 5"
    std::string kind; // "rejected", "compile-failed", "malformed-reply", "diff-does-not-apply", ...
    std::string hypothesis; // what it tried, when known
    std::vector<VerdictReason> reasons;
    std::string detail; // parse error or compile log excerpt
    std::int64_t timeMs = 0;
};

struct PromptInputs {
    const Problem* problem = nullptr;
    DeviceInfo device; // may hold only ccMajor/ccMinor or arch when no GPU is attached
    std::vector<ContextDoc> context; // already selected for the architecture and tags
    std::optional<Candidate> base; // the current candidate: where the diff applies
    std::optional<Evaluation> baseEvaluation;
    std::optional<CandidateId> bestId; // when the best differs from the base
    double bestObjective = 0;
    std::string bottleneckSummary;
    std::vector<FailedAttempt> failures; // oldest first; the builder keeps the last maxFailures
    int maxFailures = 6;
    std::optional<Hypothesis> hypothesis;
    std::string referenceSource; // the trusted reference, for semantics
    std::string objectiveName = "weighted-geomean-speedup";
    KernelLanguage language = KernelLanguage::Cuda; // what the agent is asked to write (kloop run --language)
};

struct PromptSection {
    std::string title;
    std::string text;
    bool system = true; // part of the system message, else the user message
};

struct Prompt {
    std::vector<PromptSection> sections;
    std::string system() const;
    std::string user() const;
    // Both messages with visible separators, as kloop prompt prints them.
    std::string render() const;
};

Prompt buildPrompt(const PromptInputs& in);

// Failures recorded in the session (rejected, failed to compile, crashed, timed out), oldest first,
// from LLM and human candidates (the tuner's parameter misses are not the model's business).
std::vector<FailedAttempt> failuresFromSession(const Session& s, std::size_t max);

// Fills base, its evaluation and the best from the session and the loop's context. Without a session
// candidate the problem's tunable template is the base (id "template").
void fillFromSession(PromptInputs& in, const AgentContext& ctx);

// The problem's template.cu as a candidate with its default parameters; nullopt when it is missing.
// The problem's template for a device of arch (Problem::templateFor; 0: the portable one) at its defaults.
std::optional<Candidate> templateCandidate(const Problem& p, int arch = 0);

} // namespace kl::prompt
