#pragma once
// Regimes learned from a session: where its per-shape winners change. The session's correct, fully timed
// configurations give a speedup at every tuning shape; splitting the shapes along one dim at a time (a decision
// tree of thresholds, inside the problem's own regimes) so that each part takes its own best configuration raises
// the weighted geometric mean.
// Splits are kept while each raises it by at least minGain; the parts become problem.json "regimes" for the next
// session, which verifies each part's winner on held-out shapes drawn inside it.
#include "core/problem.h"
#include "core/session.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kl {

struct RegimeSplitOptions {
    int maxRegimes = 4; // at least 1 (the problem's own regimes count, and are kept even if there are more)
    double minGain = 0.02; // a split must raise the whole-range objective by this fraction
    bool refineProblemRegimes = true; // start from problem.json's regimes; false: from the whole range
};

struct LearnedRegime {
    std::string name; // a lower-case C identifier: the problem regime's name and the cuts ("prefill_c_le_16384")
    std::string condition; // over the problem's dims; "1" for the whole range
    std::vector<Shape> shapes; // the tuning shapes inside it; none for a problem regime that nothing times
    CandidateId best; // the configuration with the highest weighted geometric-mean speedup over those shapes
    double objective = 0; // that speedup
    double singleObjective = 0; // the whole range's single best there
};

struct RegimeSplit {
    std::string gpu; // the GPU model whose measurements were used (a session may hold several)
    int shapes = 0; // the session's tuning shapes, as it timed them
    int configurations = 0; // correct, fully timed evaluations on that GPU with a speedup at every one of them
    CandidateId singleBest;
    double singleObjective = 0; // the single best over every tuning shape
    double startObjective = 0; // every shape under its best in the regimes splitting started from (or the single)
    double objective = 0; // every shape under its regime's best
    int cuts = 0; // splits learned (0: the problem's regimes, or one for the whole range, stand)
    std::vector<LearnedRegime> regimes; // a partition of the range, in the order a dispatcher tests them
};

// The tuning shapes are the session's, as it timed them (the problem's, or those `kloop run --shapes` chose). Throws
// InputError when no trusted configuration of the session was timed against the baseline.
RegimeSplit learnRegimes(const Problem& problem, const Session& session, const RegimeSplitOptions& options = {});

// The regimes as problem.json's "regimes" array.
std::string regimesJson(const RegimeSplit& split);

// A copy of the problem folder `from` in `to` (which must not exist, or be empty) whose problem.json declares the
// split's regimes (none for a split of one), every other field as it was. Returns the copy's problem, loaded and
// validated. Throws InputError naming the folder.
Problem writeProblemWithRegimes(
    const std::filesystem::path& from, const std::filesystem::path& to, const RegimeSplit& split);

} // namespace kl
