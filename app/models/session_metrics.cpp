#include "app/models/session_metrics.h"

#include <algorithm>
#include <cmath>

namespace kl::app {

namespace {

    template <typename Pick> std::optional<double> geomeanOverShapes(const kl::Evaluation& e, Pick pick)
    {
        double logSum = 0;
        int n = 0;
        for (const auto& shape : e.shapes) {
            if (shape.heldOut)
                continue;
            const std::optional<double> v = pick(shape);
            if (v && *v > 0) {
                logSum += std::log(*v);
                ++n;
            }
        }
        if (n == 0)
            return std::nullopt;
        return std::exp(logSum / n);
    }

} // namespace

std::optional<double> latencyUs(const kl::Evaluation& e)
{
    return geomeanOverShapes(e, [](const kl::ShapeResult& s) -> std::optional<double> {
        return s.timing ? std::optional<double>(s.timing->medianUs) : std::nullopt;
    });
}

std::optional<double> baselineLatencyUs(const kl::Evaluation& e)
{
    return geomeanOverShapes(e, [](const kl::ShapeResult& s) -> std::optional<double> {
        return s.baselineTiming ? std::optional<double>(s.baselineTiming->medianUs) : std::nullopt;
    });
}

std::optional<double> worstRelL2(const kl::Evaluation& e)
{
    std::optional<double> worst;
    for (const auto& shape : e.shapes) {
        for (const auto& check : shape.checks) {
            if (!worst || check.relL2 > *worst)
                worst = check.relL2;
        }
    }
    return worst;
}

std::optional<double> speedup(const kl::Evaluation& e)
{
    if (e.objective > 0)
        return e.objective;
    return std::nullopt;
}

std::optional<kl::CandidateId> bestCandidate(const kl::Session& s)
{
    std::optional<kl::CandidateId> best;
    double bestValue = 0;
    for (const auto& id : s.tree.order()) {
        const auto& c = s.tree.at(id);
        if (c.status != kl::CandidateStatus::Accepted)
            continue;
        const auto it = s.evaluations.find(id);
        if (it == s.evaluations.end())
            continue;
        const auto value = speedup(it->second);
        if (value && (!best || *value > bestValue)) {
            best = id;
            bestValue = *value;
        }
    }
    return best;
}

std::optional<double> relL2Tolerance(const kl::Problem& p)
{
    for (const auto& t : p.tensors) {
        if (kl::writesOutput(t.role))
            return p.toleranceFor(t.dtype).relL2;
    }
    return std::nullopt;
}

std::vector<const kl::Evaluation*> evaluationsInOrder(const kl::Session& s)
{
    std::vector<const kl::Evaluation*> out;
    out.reserve(s.evaluations.size());
    for (const auto& [id, e] : s.evaluations)
        out.push_back(&e);
    std::stable_sort(out.begin(), out.end(), [](const kl::Evaluation* a, const kl::Evaluation* b) {
        if (a->finishedMs != b->finishedMs)
            return a->finishedMs < b->finishedMs;
        return a->candidateId < b->candidateId;
    });
    return out;
}

QString statusText(kl::CandidateStatus s)
{
    switch (s) {
    case kl::CandidateStatus::Proposed:
        return QStringLiteral("proposed");
    case kl::CandidateStatus::PendingReview:
        return QStringLiteral("pending review");
    case kl::CandidateStatus::Approved:
        return QStringLiteral("approved");
    case kl::CandidateStatus::Compiling:
        return QStringLiteral("compiling");
    case kl::CandidateStatus::Verifying:
        return QStringLiteral("verifying");
    case kl::CandidateStatus::Timing:
        return QStringLiteral("timing");
    case kl::CandidateStatus::Accepted:
        return QStringLiteral("accepted");
    case kl::CandidateStatus::Rejected:
        return QStringLiteral("rejected");
    case kl::CandidateStatus::CompileFailed:
        return QStringLiteral("compile failed");
    case kl::CandidateStatus::Crashed:
        return QStringLiteral("crashed");
    case kl::CandidateStatus::TimedOut:
        return QStringLiteral("timed out");
    }
    return QStringLiteral("unknown");
}

QString stateText(const kl::Candidate& c)
{
    const std::string shown = kl::displayState(c);
    return shown == kl::statusName(c.status) ? statusText(c.status) : QString::fromStdString(shown);
}

QString authorText(const kl::Candidate& c)
{
    QString who;
    switch (c.author) {
    case kl::Author::Human:
        who = QStringLiteral("human");
        break;
    case kl::Author::Tuner:
        who = QStringLiteral("tuner");
        break;
    case kl::Author::Llm:
        who = QStringLiteral("LLM");
        break;
    case kl::Author::Reference:
        who = QStringLiteral("reference");
        break;
    }
    if (!c.agent.empty())
        who += QStringLiteral(" (%1)").arg(QString::fromStdString(c.agent));
    return who;
}

QString formatLatency(double us)
{
    if (us >= 1000.0)
        return QStringLiteral("%1 ms").arg(us / 1000.0, 0, 'f', 2);
    if (us >= 100.0)
        return QStringLiteral("%1 µs").arg(us, 0, 'f', 0);
    return QStringLiteral("%1 µs").arg(us, 0, 'f', 2);
}

QString formatSpeedup(double x)
{
    return QStringLiteral("%1×").arg(x, 0, 'f', 2);
}

QString firstLine(const std::string& text, int maxChars)
{
    QString s = QString::fromStdString(text).trimmed();
    const auto nl = s.indexOf(QLatin1Char('\n'));
    if (nl >= 0)
        s = s.left(nl) + QStringLiteral(" …");
    if (s.size() > maxChars)
        s = s.left(maxChars - 1) + QStringLiteral("…");
    return s;
}

} // namespace kl::app
