#pragma once
#include "core/fidelity.h"
#include "core/kernel_spec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kl {

using CandidateId = std::string; // "c0001"; validated by isSafeId before it touches a path
using HypothesisId = std::string; // "h0001"

enum class Author { Human, Tuner, Llm, Reference };
const char* authorName(Author a);
Author authorFromName(const std::string& s); // throws InputError

// Where a candidate is in its life. PendingReview: waits for a human (LLM proposals, referee flags).
enum class CandidateStatus {
    Proposed,
    PendingReview,
    Approved,
    Compiling,
    Verifying,
    Timing,
    Accepted,
    Rejected,
    CompileFailed,
    Crashed,
    TimedOut,
};
const char* statusName(CandidateStatus s);
CandidateStatus statusFromName(const std::string& s); // throws InputError
bool isTerminal(CandidateStatus s);

struct Candidate;

// The root seeded from the problem's baseline file (kloop session new / run): the reference every speedup is
// measured against.
inline constexpr const char* kSeededBaselineAgent = "problem:baseline";
bool isSeededBaseline(const Candidate& c);
// What a candidate is shown as, on the CLI and in the workbench. The seeded baseline, once measured correct, is
// "baseline": the loop's decision on it ("not significantly faster than the baseline") compares it with itself.
// Everything else is its status name.
std::string displayState(const Candidate& c);
// The reason shown next to displayState: the statusReason, or what the baseline is for.
std::string displayReason(const Candidate& c);

struct Candidate {
    CandidateId id;
    CandidateId parentId; // empty for a root
    std::string source; // device code with @kl annotations
    ParamValues params; // chosen values of the tunable parameters
    Author author = Author::Human;
    std::string agent; // e.g. "tuner:anneal", "llm:openai/gpt-x"
    HypothesisId hypothesisId;
    CandidateStatus status = CandidateStatus::Proposed;
    std::string statusReason; // why rejected / flagged, in words
    std::int64_t createdMs = 0; // unix epoch milliseconds
    std::string sourceHash; // sha256 of source, filled by the store
    Fidelity fidelity; // how the loop is asked to time it (a multi-fidelity tuner's screens); default: full
};

struct Hypothesis {
    HypothesisId id;
    std::string text;
    Author author = Author::Human;
    std::int64_t createdMs = 0;
};

// The engineer's decision on a pending candidate.
struct ReviewDecision {
    CandidateId candidateId;
    bool approved = false;
    std::string reason;
    std::int64_t decidedMs = 0;
};

} // namespace kl
