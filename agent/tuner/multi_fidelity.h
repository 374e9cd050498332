#pragma once
// Multi-fidelity search over any base strategy: asynchronous successive halving (ASHA). The base strategy
// proposes configurations; each is first screened (few timing samples on a subset of the tuning shapes, rung 0);
// a configuration goes up a rung once it is among the best 1/eta of the results its rung holds; the top rung
// is the full protocol, the only one whose results can become the session's best. Promotion never waits for a
// whole rung, so the device is never idle behind a slow screen.
#include "agent/tuner/strategy.h"
#include "core/evaluation.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace kl::tuner {

struct HalvingPlan {
    std::vector<Fidelity> screens { Fidelity { 8, 1 } }; // cheapest first; the full protocol follows them
    // One in eta of a rung's results goes up. 0, balanced: each rung's eta is the measured device time of an
    // evaluation one rung up over one at this rung, so every rung spends about the same device time (successive
    // halving's schedule, where eta is also the resource ratio between rungs), within [kMinEta, kMaxEta];
    // kUnmeasuredEta until both rungs have a measured evaluation.
    double eta = 0;
    static constexpr double kMinEta = 3, kMaxEta = 8, kUnmeasuredEta = 4;
    // A session's last `endgame` evaluations (where its budget is known), or the last it makes once nothing is left
    // to screen, take the best screens not yet promoted to the full protocol instead of screening configurations too
    // late to be promoted. On the H100 rmsnorm sweep's replay (60 evaluations, 5x1 screens, 500 seeds) 3 ends within
    // 3% of the best more often for every strategy (+8 to +36 seeds) for 14-16% more device time; 0 turns it off
    // (bench/results round 22).
    std::size_t endgame = 3;
    std::size_t fullRung() const { return screens.size(); }
};

// One evaluation the search asks for: a configuration at a rung (HalvingPlan::fullRung(): the full protocol).
struct Trial {
    std::size_t index = 0;
    std::size_t rung = 0;
    bool operator==(const Trial&) const = default;
};

// The configurations of one rung's results that may go up now. The rung's budget is floor(results / eta)
// promotions (ceil once the rung is final: nothing more will arrive), of which `promoted` used some; the free
// slots go to the best-ranked results (finite costs only; ties broken by the lower index) not yet promoted.
std::vector<std::size_t> promotable(const std::vector<std::pair<std::size_t, double>>& rungResults, double eta,
    const std::set<std::size_t>& promoted, bool final = false);

class MultiFidelitySearch {
public:
    MultiFidelitySearch(std::unique_ptr<SearchStrategy> base, HalvingPlan plan);

    // Up to n trials: promotions first (highest rung first), then new screens from the base strategy. With
    // evaluationsLeft (what the session's budget still allows, these n included), the plan's endgame: the budget's
    // last slots, or the next ones once the base strategy has nothing left, go to the best screens not yet promoted
    // (highest rung first), straight to the full protocol. It waits for the screens in flight (returns fewer trials),
    // since any of them may be the best; with nothing to promote it screens (the tuning database keeps screens).
    std::vector<Trial> next(std::size_t n, std::optional<std::size_t> evaluationsLeft = std::nullopt);
    // The base strategy learns from the cheapest rung's result of each configuration (what it ranked it by).
    // deviceMs: what the evaluation held the device for (0: unknown), which a balanced plan's eta is made of.
    void observe(const Trial& t, double cost, double deviceMs = 0);
    // The promotion ratio from rung to rung + 1 now (HalvingPlan::eta, or the balanced one).
    double etaAt(std::size_t rung) const;
    // A trial taken without a result yet (in flight before a resume).
    void markInFlight(const Trial& t);

    const HalvingPlan& plan() const { return m_plan; }
    const SearchStrategy& base() const { return *m_base; }
    // The best configuration measured with the full protocol; screens never count.
    std::optional<std::size_t> bestFull() const { return m_bestFull; }
    // Nothing left to screen and nothing left to promote.
    bool exhausted() const;

private:
    std::vector<std::size_t> promotableAt(std::size_t rung) const;
    // A rung's finite results not yet promoted, best first.
    std::vector<std::size_t> bestUnpromoted(std::size_t rung) const;
    bool screensInFlight() const;
    void promote(std::vector<Trial>& out, std::size_t index, std::size_t fromRung, std::size_t toRung);
    void screen(std::vector<Trial>& out, std::size_t count);

    std::unique_ptr<SearchStrategy> m_base;
    HalvingPlan m_plan;
    std::vector<std::vector<std::pair<std::size_t, double>>> m_results; // per rung, in observation order
    std::vector<std::set<std::size_t>> m_taken; // per rung: proposed (in flight or observed)
    std::vector<std::set<std::size_t>> m_promoted; // per rung: sent to the next rung
    std::vector<std::pair<double, int>> m_deviceMs; // per rung: total measured device ms and evaluations
    std::optional<std::size_t> m_bestFull;
    double m_bestFullCost = 0;
    std::size_t m_endgamePromotions = 0; // at most HalvingPlan::endgame
};

} // namespace kl::tuner
