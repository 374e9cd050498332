#include "core/candidate.h"

#include "core/errors.h"

namespace kl {

namespace {
    struct StatusName {
        CandidateStatus status;
        const char* name;
    };
    constexpr StatusName kStatusNames[] = {
        { CandidateStatus::Proposed, "proposed" },
        { CandidateStatus::PendingReview, "pending-review" },
        { CandidateStatus::Approved, "approved" },
        { CandidateStatus::Compiling, "compiling" },
        { CandidateStatus::Verifying, "verifying" },
        { CandidateStatus::Timing, "timing" },
        { CandidateStatus::Accepted, "accepted" },
        { CandidateStatus::Rejected, "rejected" },
        { CandidateStatus::CompileFailed, "compile-failed" },
        { CandidateStatus::Crashed, "crashed" },
        { CandidateStatus::TimedOut, "timed-out" },
    };
} // namespace

const char* authorName(Author a)
{
    switch (a) {
    case Author::Human:
        return "human";
    case Author::Tuner:
        return "tuner";
    case Author::Llm:
        return "llm";
    case Author::Reference:
        return "reference";
    }
    return "human";
}

Author authorFromName(const std::string& s)
{
    for (Author a : { Author::Human, Author::Tuner, Author::Llm, Author::Reference })
        if (s == authorName(a))
            return a;
    throw InputError("unknown author '" + s + "' (expected human, tuner, llm or reference)");
}

const char* statusName(CandidateStatus s)
{
    for (const auto& n : kStatusNames)
        if (n.status == s)
            return n.name;
    return "proposed";
}

CandidateStatus statusFromName(const std::string& s)
{
    for (const auto& n : kStatusNames)
        if (s == n.name)
            return n.status;
    throw InputError("unknown candidate status '" + s + "'");
}

bool isTerminal(CandidateStatus s)
{
    switch (s) {
    case CandidateStatus::Accepted:
    case CandidateStatus::Rejected:
    case CandidateStatus::CompileFailed:
    case CandidateStatus::Crashed:
    case CandidateStatus::TimedOut:
        return true;
    default:
        return false;
    }
}

bool isSeededBaseline(const Candidate& c)
{
    return c.parentId.empty() && c.agent == kSeededBaselineAgent;
}

namespace {
    // Measured and correct: the loop decided on its speed (rules "decide.*"), which for the baseline is moot.
    bool baselineMeasured(const Candidate& c)
    {
        if (!isSeededBaseline(c))
            return false;
        if (c.status == CandidateStatus::Accepted)
            return true;
        return c.status == CandidateStatus::Rejected && c.statusReason.rfind("decide.", 0) == 0;
    }
} // namespace

std::string displayState(const Candidate& c)
{
    return baselineMeasured(c) ? "baseline" : statusName(c.status);
}

std::string displayReason(const Candidate& c)
{
    return baselineMeasured(c) ? "the problem's baseline: speedups are measured against it" : c.statusReason;
}

} // namespace kl
