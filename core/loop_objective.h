#pragma once
// The session objective and the loop's accept/reject rule. Pure functions over evaluations so the
// decision can be tested without a loop, a store or a GPU.
#include "core/evaluation.h"

#include <optional>
#include <string>
#include <vector>

namespace kl {

// Names accepted in SessionSettings::objective. Every objective is "higher is better".
//   weighted-geomean-speedup  exp(sum w_i log s_i / sum w_i) over the timed tuning shapes (default)
//   geomean-speedup           the same with every weight 1
//   min-speedup               the worst shape's speedup
const std::vector<std::string>& objectiveNames();
bool isKnownObjective(const std::string& name);

// The objective of one evaluation with a 95% confidence interval, derived from the per-shape speedup
// intervals in log space (shapes treated as independent).
struct ObjectiveValue {
    double value = 0;
    double ciLow = 0;
    double ciHigh = 0;
    double logHalfWidth() const; // half width of the interval in log space
};

// Throws InputError for an unknown objective name. nullopt (with *why) when the evaluation has no usable
// speedup on some timed shape. With a regime: over the timed tuning shapes inside it (held-out shapes, drawn afresh
// for each evaluation, never enter an objective: two candidates are compared on the same shapes).
std::optional<ObjectiveValue> computeObjective(
    const Evaluation& e, const std::string& objective, std::string* why = nullptr, const Regime* regime = nullptr);

// A candidate's objective against the best's (the baseline, 1.0, when there is none): the ratio and the half
// width of its 95% interval in log space. The one "better than the best" rule: the interval lies above 1.0.
struct BestComparison {
    double logRatio = 0;
    double logHalfWidth = 0;
    bool improves() const { return logRatio - logHalfWidth > 0; }
    bool slower() const { return logRatio + logHalfWidth < 0; }
};
BestComparison compareWithBest(const ObjectiveValue& candidate, const std::optional<ObjectiveValue>& best);

// A regime's best so far, for a decision per regime.
struct RegimeStanding {
    Regime regime;
    std::optional<ObjectiveValue> best; // nullopt: compare against the baseline
    std::string bestId; // for messages
};

struct DecideInput {
    const Evaluation* evaluation = nullptr; // what the evaluator returned
    std::string objective = "weighted-geomean-speedup";
    std::optional<ObjectiveValue> best; // the session's best so far; nullopt: compare against the baseline
    std::string bestId; // for messages
    // Non-empty: the objective is computed per regime and a candidate has to beat some regime's best instead of
    // the best over every shape.
    std::vector<RegimeStanding> regimes {};
};

struct Decision {
    Verdict verdict = Verdict::Rejected; // Accepted, Rejected, PendingReview, CompileFailed, Crashed, TimedOut
    std::vector<VerdictReason> reasons; // the evaluator's reasons followed by the loop's own
    std::optional<ObjectiveValue> objective; // over every timed shape, with regimes too
    bool improves = false; // faster than the best (some regime's best) with the interval of the ratio above 1.0
    std::vector<RegimeResult> regimes {}; // one per DecideInput::regimes; won: improves that regime's best
};

// The rule: accepted only if correct on every verification shape, unflagged, and faster than the best on
// the objective with the confidence interval of the ratio excluding 1.0 (with regimes: faster than the best of
// at least one regime on that regime's objective; the candidate becomes the best of each regime it improves). A flagged
// candidate (non-blocking reason or PendingReview from the referee) that improves waits for a human; it is never
// auto-accepted. A jump too large over the best is one such flag: the referee's physics.suspicious-jump, which the loop
// feeds the session's best and review factor (EvaluateOptions::best).
Decision decide(const DecideInput& in);

// The evaluation as recorded: verdict, reasons and objective from the decision.
Evaluation applyDecision(Evaluation e, const Decision& d);

} // namespace kl
