#include "core/loop_objective.h"

#include "core/errors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace kl {

namespace {

    std::string fmt(const char* f, double a, double b = 0, double c = 0)
    {
        char buf[160];
        std::snprintf(buf, sizeof buf, f, a, b, c);
        return buf;
    }

    // Log-space half width of a shape's speedup interval; 0 when the evaluator gave none.
    double shapeLogHalfWidth(const ShapeResult& s)
    {
        if (s.speedupCiLow <= 0 || s.speedupCiHigh <= 0 || s.speedup <= 0)
            return 0;
        const double l = std::log(s.speedup);
        return std::max({ std::log(s.speedupCiHigh) - l, l - std::log(s.speedupCiLow), 0.0 });
    }

} // namespace

const std::vector<std::string>& objectiveNames()
{
    static const std::vector<std::string> names { "weighted-geomean-speedup", "geomean-speedup", "min-speedup" };
    return names;
}

bool isKnownObjective(const std::string& name)
{
    const auto& n = objectiveNames();
    return std::find(n.begin(), n.end(), name) != n.end();
}

double ObjectiveValue::logHalfWidth() const
{
    if (value <= 0 || ciLow <= 0 || ciHigh <= 0)
        return 0;
    const double l = std::log(value);
    return std::max({ std::log(ciHigh) - l, l - std::log(ciLow), 0.0 });
}

namespace {

    bool inRegime(const Regime& r, const Shape& s)
    {
        try {
            return r.contains(s);
        } catch (const ExprError&) {
            return false; // validateProblem evaluated every condition at the declared shapes
        }
    }

} // namespace

std::optional<ObjectiveValue> computeObjective(
    const Evaluation& e, const std::string& objective, std::string* why, const Regime* regime)
{
    if (!isKnownObjective(objective))
        throw InputError("unknown objective '" + objective
            + "' (known: weighted-geomean-speedup, geomean-speedup, "
              "min-speedup)");
    std::vector<const ShapeResult*> timed;
    for (const ShapeResult& s : e.shapes) {
        if (s.heldOut || !s.timing || (regime && !inRegime(*regime, s.shape)))
            continue;
        if (!(s.speedup > 0) || !std::isfinite(s.speedup)) {
            if (why)
                *why = "shape " + s.shape.label() + " has no speedup over the baseline";
            return std::nullopt;
        }
        timed.push_back(&s);
    }
    if (timed.empty()) {
        if (why)
            *why = regime ? "no timed shape in regime " + regime->name : std::string("no timed shape");
        return std::nullopt;
    }
    if (objective == "min-speedup") {
        const ShapeResult* worst = *std::min_element(timed.begin(), timed.end(),
            [](const ShapeResult* a, const ShapeResult* b) { return a->speedup < b->speedup; });
        const double h = shapeLogHalfWidth(*worst);
        return ObjectiveValue { worst->speedup, worst->speedup * std::exp(-h), worst->speedup * std::exp(h) };
    }
    const bool weighted = objective == "weighted-geomean-speedup";
    double wsum = 0;
    for (const ShapeResult* s : timed)
        wsum += weighted ? std::max(s->shape.weight, 0.0) : 1.0;
    if (!(wsum > 0)) {
        if (why)
            *why = "the timed shapes have zero total weight";
        return std::nullopt;
    }
    double logValue = 0;
    double var = 0;
    for (const ShapeResult* s : timed) {
        const double w = (weighted ? std::max(s->shape.weight, 0.0) : 1.0) / wsum;
        logValue += w * std::log(s->speedup);
        const double h = shapeLogHalfWidth(*s);
        var += w * w * h * h;
    }
    const double h = std::sqrt(var);
    return ObjectiveValue { std::exp(logValue), std::exp(logValue - h), std::exp(logValue + h) };
}

BestComparison compareWithBest(const ObjectiveValue& candidate, const std::optional<ObjectiveValue>& best)
{
    const ObjectiveValue base = best.value_or(ObjectiveValue { 1.0, 1.0, 1.0 });
    return { std::log(candidate.value) - std::log(base.value),
        std::hypot(candidate.logHalfWidth(), base.logHalfWidth()) };
}

namespace {

    std::string comparisonText(const BestComparison& c)
    {
        const double h = c.logHalfWidth;
        return fmt(
            "%.3fx, 95%% CI [%.3f, %.3f]", std::exp(c.logRatio), std::exp(c.logRatio - h), std::exp(c.logRatio + h));
    }

    // A correct, unblocked candidate judged regime by regime: it wins each regime whose best it improves.
    Decision decideByRegime(const DecideInput& in, const Evaluation& e, bool flagged, Decision d)
    {
        std::string won, lost;
        bool allSlower = true;
        for (const RegimeStanding& st : in.regimes) {
            RegimeResult r;
            r.name = st.regime.name;
            r.condition = st.regime.condition.text();
            for (const ShapeResult& s : e.shapes)
                if (inRegime(st.regime, s.shape)) {
                    r.verifiedShapes += s.correct ? 1 : 0;
                    r.timedShapes += s.timing && s.speedup > 0 ? 1 : 0;
                }
            std::string why;
            const std::optional<ObjectiveValue> v = computeObjective(e, in.objective, &why, &st.regime);
            const std::string against = st.best ? "its best " + st.bestId : std::string("the baseline");
            if (!v) {
                lost += (lost.empty() ? "" : "; ") + r.name + ": " + why;
                d.regimes.push_back(r);
                continue;
            }
            r.objective = v->value;
            r.objectiveCiLow = v->ciLow;
            r.objectiveCiHigh = v->ciHigh;
            const BestComparison c = compareWithBest(*v, st.best);
            r.won = c.improves();
            (r.won ? won : lost) += std::string((r.won ? won : lost).empty() ? "" : "; ") + r.name + " vs " + against
                + ": " + comparisonText(c);
            allSlower &= c.slower();
            d.improves |= r.won;
            d.regimes.push_back(r);
        }
        if (!d.improves) {
            d.reasons.push_back({ allSlower ? "decide.slower" : "decide.not-significant",
                std::string(allSlower ? "slower than the best in every regime: "
                                      : "not significantly faster than the best in any regime: ")
                    + lost,
                0, true });
            d.verdict = Verdict::Rejected;
            return d;
        }
        for (RegimeResult& r : d.regimes)
            r.won = r.won && !flagged; // a flagged candidate wins nothing until the engineer approves it
        if (flagged) {
            d.reasons.push_back({ "decide.flagged",
                "faster in regime " + won + " but flagged by the referee: waits for review", 0, false });
            d.verdict = Verdict::PendingReview;
            return d;
        }
        d.reasons.push_back({ "decide.faster", "faster in regime " + won, 0, false });
        d.verdict = Verdict::Accepted;
        return d;
    }

} // namespace

Decision decide(const DecideInput& in)
{
    Decision d;
    const Evaluation& e = *in.evaluation;
    d.reasons = e.reasons;
    switch (e.verdict) {
    case Verdict::CompileFailed:
    case Verdict::Crashed:
    case Verdict::TimedOut:
        d.verdict = e.verdict;
        if (d.reasons.empty())
            d.reasons.push_back(
                { "harness." + std::string(verdictName(e.verdict)), "the harness reported this verdict", 0, true });
        return d;
    default:
        break;
    }

    bool blocked = e.verdict == Verdict::Rejected;
    bool flagged = e.verdict == Verdict::PendingReview;
    for (const VerdictReason& r : e.reasons) {
        if (r.blocking)
            blocked = true;
        else
            flagged = true;
    }
    if (e.verdict == Verdict::Rejected && e.reasons.empty())
        d.reasons.push_back({ "harness.rejected", "the harness rejected the candidate", 0, true });

    std::string wrongShapes;
    for (const ShapeResult& s : e.shapes)
        if (!s.correct)
            wrongShapes += (wrongShapes.empty() ? "" : ", ") + s.shape.label() + (s.heldOut ? " (held out)" : "");
    if (e.shapes.empty())
        wrongShapes = "no shape was verified";
    if (!wrongShapes.empty()) {
        d.reasons.push_back({ "decide.incorrect", "wrong results on: " + wrongShapes, 0, true });
        blocked = true;
    }

    std::string why;
    d.objective = computeObjective(e, in.objective, &why);
    if (!d.objective) {
        if (!blocked)
            d.reasons.push_back({ "decide.no-objective", "cannot compute " + in.objective + ": " + why, 0, true });
        d.verdict = Verdict::Rejected;
        return d;
    }
    if (blocked) {
        d.verdict = Verdict::Rejected;
        return d;
    }

    if (!in.regimes.empty())
        return decideByRegime(in, e, flagged, std::move(d));

    const std::string against
        = in.best ? "best " + (in.bestId.empty() ? std::string("so far") : in.bestId) : "the baseline";
    const BestComparison vsBest = compareWithBest(*d.objective, in.best);
    const double logRatio = vsBest.logRatio;
    const double h = vsBest.logHalfWidth;
    const double ratio = std::exp(logRatio);
    const std::string ratioText
        = fmt("%.3fx, 95%% CI [%.3f, %.3f]", ratio, std::exp(logRatio - h), std::exp(logRatio + h));
    d.improves = vsBest.improves();
    if (!d.improves) {
        const bool slower = vsBest.slower();
        d.reasons.push_back({ slower ? "decide.slower" : "decide.not-significant",
            (slower ? "slower than " : "not significantly faster than ") + against + ": " + ratioText
                + (slower ? "" : " includes 1.0"),
            0, true });
        d.verdict = Verdict::Rejected;
        return d;
    }
    if (flagged) {
        d.reasons.push_back({ "decide.flagged",
            "faster than " + against + " (" + ratioText + ") but flagged by the referee: waits for review", 0, false });
        d.verdict = Verdict::PendingReview;
        return d;
    }
    d.reasons.push_back({ "decide.faster", "faster than " + against + ": " + ratioText, 0, false });
    d.verdict = Verdict::Accepted;
    return d;
}

Evaluation applyDecision(Evaluation e, const Decision& d)
{
    e.verdict = d.verdict;
    e.reasons = d.reasons;
    e.regimes = d.regimes;
    if (d.objective) {
        e.objective = d.objective->value;
        e.objectiveCiLow = d.objective->ciLow;
        e.objectiveCiHigh = d.objective->ciHigh;
    }
    return e;
}

} // namespace kl
