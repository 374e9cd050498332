#pragma once
// The current best of a session as the referee needs it (EvaluateOptions::best): the loop and kloop eval
// --session both take it from here.
#include "core/evaluator.h"
#include "core/session.h"

#include <optional>

namespace kl {

// The session's best: the accepted candidate with the highest positive objective, the first in tree order on a tie.
std::optional<CandidateId> bestAcceptedId(const Session& session);

// bestId: the loop's current best; none: the accepted candidate with the highest objective. Empty when the
// session has no accepted, measured candidate.
std::optional<CurrentBest> currentBestOf(const Session& session, const std::optional<CandidateId>& bestId = {});

// A regime of the session with its best: the accepted candidate that won it with the highest objective there.
struct RegimeWinner {
    std::string regime;
    std::string condition;
    std::optional<CandidateId> winner; // none: no candidate beat the baseline there yet
    RegimeResult result; // the winner's record for the regime (objective: its speedup over the baseline there)
};
// In the order the session's latest evaluation with regimes lists them; empty for a session of one regime.
std::vector<RegimeWinner> regimeWinners(const Session& session);

} // namespace kl
