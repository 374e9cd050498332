#include "core/evaluation.h"

#include "core/errors.h"

namespace kl {

namespace {
    struct VerdictName {
        Verdict v;
        const char* name;
    };
    constexpr VerdictName kVerdicts[] = {
        { Verdict::Accepted, "accepted" },
        { Verdict::Rejected, "rejected" },
        { Verdict::PendingReview, "pending-review" },
        { Verdict::CompileFailed, "compile-failed" },
        { Verdict::Crashed, "crashed" },
        { Verdict::TimedOut, "timed-out" },
        { Verdict::Correct, "correct" },
    };
} // namespace

const char* verdictName(Verdict v)
{
    for (const auto& n : kVerdicts)
        if (n.v == v)
            return n.name;
    return "rejected";
}

Verdict verdictFromName(const std::string& s)
{
    for (const auto& n : kVerdicts)
        if (s == n.name)
            return n.v;
    throw InputError("unknown verdict '" + s + "'");
}

bool ranToCompletion(Verdict v)
{
    return v != Verdict::CompileFailed && v != Verdict::Crashed && v != Verdict::TimedOut;
}

bool isLoopDecision(const VerdictReason& r)
{
    return r.rule.rfind("decide.", 0) == 0;
}

bool isReviewFlag(const VerdictReason& r)
{
    return !r.blocking && !isLoopDecision(r);
}

bool Evaluation::correctEverywhere() const
{
    if (shapes.empty())
        return false;
    for (const auto& s : shapes)
        if (!s.correct)
            return false;
    return true;
}

} // namespace kl
