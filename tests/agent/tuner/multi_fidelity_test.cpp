#include "agent/tuner/multi_fidelity.h"
#include "core/errors.h"

#include <gtest/gtest.h>
#include <map>
#include <set>

using namespace kl;
using namespace kl::tuner;

namespace {

// 8 x 8 grid, cost = a bowl with its minimum at (5, 2).
SearchSpace grid()
{
    std::vector<ParamValues> configs;
    std::vector<std::vector<std::int64_t>> values(2);
    for (int a = 0; a < 8; ++a)
        for (int b = 0; b < 8; ++b) {
            configs.push_back({ { "A", a }, { "B", b } });
            values[0].push_back(a);
            values[1].push_back(b);
        }
    return SearchSpace::fromConfigs({ "A", "B" }, values, configs);
}

double bowl(const SearchSpace& space, std::size_t i)
{
    const auto& p = space.config(i);
    const double a = static_cast<double>(p.at("A")) - 5, b = static_cast<double>(p.at("B")) - 2;
    return 1.0 + 0.1 * a * a + 0.05 * b * b;
}

// Runs a search to exhaustion one trial at a time; every result is the bowl's cost (screens alike).
std::vector<Trial> runToEnd(MultiFidelitySearch& search, const SearchSpace& space, std::size_t batch = 1)
{
    std::vector<Trial> all;
    for (int guard = 0; guard < 10000 && !search.exhausted(); ++guard) {
        const auto trials = search.next(batch);
        if (trials.empty())
            break;
        for (const Trial& t : trials) {
            all.push_back(t);
            search.observe(t, bowl(space, t.index));
        }
    }
    return all;
}

// One parameter A in 0 .. 8.
SearchSpace lineOfNine()
{
    std::vector<ParamValues> configs;
    std::vector<std::vector<std::int64_t>> values(1);
    for (int a = 0; a < 9; ++a) {
        configs.push_back({ { "A", a } });
        values[0].push_back(a);
    }
    return SearchSpace::fromConfigs({ "A" }, values, configs);
}

// An exhaustive search whose first ten configurations are screened and observed.
MultiFidelitySearch afterTenScreens(const SearchSpace& space, const HalvingPlan& plan)
{
    MultiFidelitySearch search(makeStrategy("exhaustive", space, 1), plan);
    for (const Trial& t : search.next(10))
        search.observe(t, bowl(space, t.index));
    return search;
}

} // namespace

TEST(MultiFidelity, PromotableFillsTheRungsBudgetWithTheBestNotYetPromoted)
{
    const double inf = std::numeric_limits<double>::infinity();
    // 9 results, eta 3: the best 3 (ties: the lower index first), the failure never.
    const std::vector<std::pair<std::size_t, double>> rung { { 10, 5.0 }, { 11, 1.0 }, { 12, inf }, { 13, 2.0 },
        { 14, 2.0 }, { 15, 9.0 }, { 16, 3.0 }, { 17, 4.0 }, { 18, 6.0 } };
    EXPECT_EQ(promotable(rung, 3, {}), (std::vector<std::size_t> { 11, 13, 14 }));
    EXPECT_EQ(promotable(rung, 3, { 11, 13 }), (std::vector<std::size_t> { 14 }));
    EXPECT_EQ(promotable(rung, 3, { 11, 13, 14 }), std::vector<std::size_t> {});
    // A promotion made earlier (16 ranked first then) uses one of the three slots.
    EXPECT_EQ(promotable(rung, 3, { 16 }), (std::vector<std::size_t> { 11, 13 }));
    // Fewer results than eta: nothing yet, unless the rung is final (its budget rounds up).
    EXPECT_TRUE(promotable({ { 1, 1.0 }, { 2, 2.0 } }, 3, {}).empty());
    EXPECT_EQ(promotable({ { 1, 1.0 }, { 2, 2.0 } }, 3, {}, true), (std::vector<std::size_t> { 1 }));
    // The floor counts failures too: 4 results with 3 failures, eta 2 -> 2 slots, 1 finite to fill them.
    EXPECT_EQ(promotable({ { 1, inf }, { 2, inf }, { 3, 7.0 }, { 4, inf } }, 2, {}), (std::vector<std::size_t> { 3 }));
}

TEST(MultiFidelity, ScreensFirstPromotesOneInEtaAndOnlyFullResultsMakeTheBest)
{
    const SearchSpace space = grid();
    HalvingPlan plan;
    plan.screens = { Fidelity { 4, 1 } };
    plan.eta = 4;
    MultiFidelitySearch search(makeStrategy("random", space, 7), plan);
    // The first four trials are screens; nothing is promoted before four screen results exist.
    const auto first = search.next(4);
    ASSERT_EQ(first.size(), 4u);
    for (const Trial& t : first)
        EXPECT_EQ(t.rung, 0u);
    for (const Trial& t : first)
        search.observe(t, bowl(space, t.index));
    EXPECT_FALSE(search.bestFull()); // screens never make a best
    const auto promoted = search.next(1);
    ASSERT_EQ(promoted.size(), 1u);
    EXPECT_EQ(promoted[0].rung, plan.fullRung());
    std::size_t bestScreened = first[0].index;
    for (const Trial& t : first)
        if (bowl(space, t.index) < bowl(space, bestScreened))
            bestScreened = t.index;
    EXPECT_EQ(promoted[0].index, bestScreened);
    search.observe(promoted[0], bowl(space, promoted[0].index));
    EXPECT_EQ(search.bestFull(), bestScreened);

    // To the end: every configuration screened once, a quarter (floor) promoted, each once; the best is the optimum
    // (it screens best, so it is always promoted).
    const auto rest = runToEnd(search, space);
    std::map<std::size_t, std::set<std::size_t>> byRung;
    std::size_t trials = first.size() + promoted.size();
    for (const Trial& t : rest) {
        EXPECT_TRUE(byRung[t.rung].insert(t.index).second) << "trial repeated";
        ++trials;
    }
    for (const Trial& t : first)
        byRung[0].insert(t.index);
    byRung[1].insert(promoted[0].index);
    EXPECT_EQ(byRung[0].size(), space.size());
    EXPECT_EQ(byRung[1].size(), space.size() / 4);
    EXPECT_EQ(trials, space.size() + space.size() / 4);
    for (std::size_t i : byRung[1])
        EXPECT_TRUE(byRung[0].count(i)) << "promoted without a screen";
    ASSERT_TRUE(search.bestFull());
    EXPECT_EQ(space.config(*search.bestFull()), (ParamValues { { "A", 5 }, { "B", 2 } }));
    EXPECT_TRUE(search.exhausted());
}

TEST(MultiFidelity, TwoScreenRungsClimbOneAtATime)
{
    const SearchSpace space = grid();
    HalvingPlan plan;
    plan.screens = { Fidelity { 3, 1 }, Fidelity { 10, 2 } };
    plan.eta = 2;
    MultiFidelitySearch search(makeStrategy("exhaustive", space, 1), plan);
    const auto all = runToEnd(search, space, 4);
    std::map<std::size_t, std::size_t> count;
    std::map<std::size_t, std::set<std::size_t>> at;
    for (const Trial& t : all) {
        ++count[t.rung];
        at[t.rung].insert(t.index);
    }
    EXPECT_EQ(count[0], 64u);
    EXPECT_EQ(count[1], 32u);
    EXPECT_EQ(count[2], 16u);
    for (std::size_t i : at[2])
        EXPECT_TRUE(at[1].count(i));
    for (std::size_t i : at[1])
        EXPECT_TRUE(at[0].count(i));
}

TEST(MultiFidelity, EveryBaseStrategyIsDeterministicPerSeedAndNeverRepeatsATrial)
{
    const SearchSpace space = grid();
    for (const std::string& name : strategyNames()) {
        auto trialsOf = [&](std::uint64_t seed) {
            MultiFidelitySearch search(makeStrategy(name, space, seed), HalvingPlan {});
            std::vector<Trial> out;
            for (int round = 0; round < 12; ++round) {
                const auto batch = search.next(3);
                for (const Trial& t : batch) {
                    out.push_back(t);
                    search.observe(t, bowl(space, t.index));
                }
            }
            return out;
        };
        const auto a = trialsOf(3), b = trialsOf(3);
        EXPECT_EQ(a, b) << name;
        std::set<std::pair<std::size_t, std::size_t>> seen;
        for (const Trial& t : a)
            EXPECT_TRUE(seen.insert({ t.rung, t.index }).second) << name;
        EXPECT_GT(seen.size(), 20u) << name;
    }
}

TEST(MultiFidelity, ResumedSearchDoesNotRepeatWhatIsInFlightOrRecorded)
{
    const SearchSpace space = grid();
    HalvingPlan plan;
    plan.eta = 2;
    MultiFidelitySearch search(makeStrategy("random", space, 5), plan);
    // A store held: two screens with results, one screen in flight, the better one already promoted and in flight.
    search.observe({ 0, 0 }, 3.0);
    search.observe({ 1, 0 }, 2.0);
    search.markInFlight({ 2, 0 });
    search.markInFlight({ 1, 1 });
    for (const Trial& t : search.next(20)) {
        EXPECT_FALSE(t.rung == 0 && t.index <= 2) << t.index;
        EXPECT_FALSE(t.rung == 1 && t.index == 1);
    }
}

TEST(MultiFidelity, BadPlansAreInputErrors)
{
    const SearchSpace space = grid();
    HalvingPlan plan;
    plan.eta = 1;
    EXPECT_THROW(MultiFidelitySearch(makeStrategy("random", space, 1), plan), InputError);
    plan.eta = -2;
    EXPECT_THROW(MultiFidelitySearch(makeStrategy("random", space, 1), plan), InputError);
    plan.eta = 3;
    plan.screens = { Fidelity {} };
    EXPECT_THROW(MultiFidelitySearch(makeStrategy("random", space, 1), plan), InputError);
}

// A balanced plan (eta 0) promotes one in (full device time / screen device time) within [3, 8]: 4 until both rungs
// have a measured evaluation, then what they cost.
TEST(MultiFidelity, ABalancedPlanPromotesByTheMeasuredCostRatio)
{
    const SearchSpace space = grid();
    auto run = [&](double screenMs, double fullMs) {
        HalvingPlan plan;
        plan.screens = { Fidelity { 5, 1 } };
        MultiFidelitySearch search(makeStrategy("exhaustive", space, 1), plan);
        EXPECT_EQ(search.etaAt(0), HalvingPlan::kUnmeasuredEta);
        std::size_t full = 0;
        for (int guard = 0; guard < 1000 && !search.exhausted(); ++guard)
            for (const Trial& t : search.next(1)) {
                full += t.rung == plan.fullRung();
                search.observe(t, bowl(space, t.index), t.rung == plan.fullRung() ? fullMs : screenMs);
            }
        return std::make_pair(search.etaAt(0), full);
    };
    const auto [eta6, full6] = run(2.0, 12.0);
    EXPECT_DOUBLE_EQ(eta6, 6.0);
    // 64 screens: the first promotion at 4 results (no full cost measured yet), then one in 6, rounded up at the end.
    EXPECT_GE(full6, 64u / 6);
    EXPECT_LE(full6, 64u / 6 + 2);
    EXPECT_DOUBLE_EQ(run(1.0, 40.0).first, HalvingPlan::kMaxEta);
    EXPECT_DOUBLE_EQ(run(10.0, 12.0).first, HalvingPlan::kMinEta);
    const auto [eta4, full4] = run(0.0, 0.0); // nothing measured (a cache without device_ms): the fixed default
    EXPECT_DOUBLE_EQ(eta4, HalvingPlan::kUnmeasuredEta);
    EXPECT_EQ(full4, 64u / 4);
}

TEST(MultiFidelity, ALateBestIsPromotedWhenTheSpaceRunsOut)
{
    // Nine configurations, each cheaper than the one before: the last screened is the best, and with eta 4 the
    // floor budget (2) is spent before it arrives; the final rung rounds up so it still reaches the full protocol.
    const SearchSpace space = lineOfNine();
    HalvingPlan plan;
    plan.eta = 4;
    MultiFidelitySearch search(makeStrategy("exhaustive", space, 1), plan);
    std::set<std::size_t> full;
    for (int guard = 0; guard < 100 && !search.exhausted(); ++guard)
        for (const Trial& t : search.next(1)) {
            if (t.rung == plan.fullRung())
                full.insert(t.index);
            search.observe(t, 10.0 - static_cast<double>(t.index));
        }
    EXPECT_EQ(full.size(), 3u);
    EXPECT_TRUE(full.count(8));
    EXPECT_EQ(search.bestFull(), 8u);
}

TEST(MultiFidelity, ABudgetsLastEvaluationsPromoteTheBestScreensNotYetPromoted)
{
    const SearchSpace space = grid();
    HalvingPlan plan;
    plan.eta = 8;
    ASSERT_EQ(plan.endgame, 3u);
    // Twenty evaluations told one at a time: the same walk as an untold search until the last three, which go to the
    // full protocol, the best-screened first.
    MultiFidelitySearch told(makeStrategy("random", space, 11), plan), untold(makeStrategy("random", space, 11), plan);
    std::vector<std::pair<double, std::size_t>> screened;
    std::set<std::size_t> full;
    std::size_t promotedBefore = 0;
    for (std::size_t left = 20; left > 0; --left) {
        const auto t = told.next(1, left);
        ASSERT_EQ(t.size(), 1u) << left;
        if (left > 3) {
            EXPECT_EQ(t, untold.next(1)) << left;
            promotedBefore += t[0].rung == plan.fullRung() ? 1 : 0;
            untold.observe(t[0], bowl(space, t[0].index));
        } else {
            ASSERT_EQ(t[0].rung, plan.fullRung()) << left;
            std::sort(screened.begin(), screened.end());
            const auto best
                = std::find_if(screened.begin(), screened.end(), [&](const auto& s) { return !full.count(s.second); });
            ASSERT_NE(best, screened.end());
            EXPECT_EQ(t[0].index, best->second) << left;
        }
        if (t[0].rung == 0)
            screened.emplace_back(bowl(space, t[0].index), t[0].index);
        else
            EXPECT_TRUE(full.insert(t[0].index).second) << "promoted twice";
        told.observe(t[0], bowl(space, t[0].index));
    }
    EXPECT_GE(promotedBefore, 1u); // one in eta = 8 of the first 16 screens
    EXPECT_EQ(full.size(), promotedBefore + 3);
    ASSERT_TRUE(told.bestFull());
    std::sort(screened.begin(), screened.end());
    EXPECT_EQ(*told.bestFull(), screened.front().second);
}

TEST(MultiFidelity, ABatchStraddlingTheEndgameScreensUntilItThenWaitsForItsScreensAndPromotes)
{
    const SearchSpace space = grid();
    HalvingPlan plan;
    plan.eta = 8;
    MultiFidelitySearch search = afterTenScreens(space, plan);
    std::vector<std::pair<double, std::size_t>> ranked;
    for (std::size_t i = 0; i < 11; ++i)
        ranked.emplace_back(bowl(space, i), i);
    std::sort(ranked.begin(), ranked.begin() + 10);
    // Five left: the promotion the rung owes (floor(10 / 8) = 1) and one screen while more than three are left; then
    // the endgame waits for that screen, which may be the best.
    const auto batch = search.next(5, 5);
    EXPECT_EQ(batch, (std::vector<Trial> { { ranked[0].second, 1 }, { 10, 0 } }));
    EXPECT_TRUE(search.next(3, 3).empty());
    for (const Trial& t : batch)
        search.observe(t, bowl(space, t.index));
    // Three left: the best three screens not yet promoted, best first.
    ranked.erase(ranked.begin());
    std::sort(ranked.begin(), ranked.end());
    EXPECT_EQ(search.next(3, 3),
        (std::vector<Trial> { { ranked[0].second, 1 }, { ranked[1].second, 1 }, { ranked[2].second, 1 } }));
    // Nothing left to promote: the endgame screens rather than idle; endgame 0 never promotes early.
    MultiFidelitySearch fresh(makeStrategy("exhaustive", space, 1), plan);
    EXPECT_EQ(fresh.next(2, 2), (std::vector<Trial> { { 0, 0 }, { 1, 0 } }));
    plan.endgame = 0;
    MultiFidelitySearch off = afterTenScreens(space, plan);
    const auto last = off.next(3, 3);
    ASSERT_EQ(last.size(), 3u);
    EXPECT_EQ(last[0].rung, 1u);
    EXPECT_EQ(last[1], (Trial { 10, 0 }));
    EXPECT_EQ(last[2], (Trial { 11, 0 }));
}

TEST(MultiFidelity, TheEndgameAlsoComesWhenNothingIsLeftToScreenBeforeTheBudgetEnds)
{
    // Nine configurations, a budget of 40: every one screened, the rung's ceil(9 / 4) = 3 promoted, then the endgame's
    // three best of the rest, and nothing more although 25 evaluations are left.
    const SearchSpace space = lineOfNine();
    HalvingPlan plan;
    plan.eta = 4;
    MultiFidelitySearch search(makeStrategy("random", space, 3), plan);
    std::size_t evaluations = 0, screens = 0;
    std::set<std::size_t> full;
    for (std::vector<Trial> t; !(t = search.next(1, 40 - evaluations)).empty(); ++evaluations) {
        if (t[0].rung == 0)
            ++screens;
        else
            EXPECT_TRUE(full.insert(t[0].index).second) << "promoted twice";
        search.observe(t[0], 10.0 - static_cast<double>(t[0].index));
    }
    EXPECT_EQ(screens, 9u);
    EXPECT_EQ(full.size(), 3u + 3u);
    for (std::size_t best : { 6, 7, 8 })
        EXPECT_TRUE(full.count(best)) << best; // promoted by the rung or, if not, by the endgame
    EXPECT_EQ(evaluations, 15u);
}

TEST(MultiFidelity, AnEndgamePromotionPastAScreenRungIsBookedAgainstTheRungItCameFrom)
{
    // Two screen rungs: the endgame sends rung-0 results straight to the full protocol. Replayed as a resume does
    // (every trial observed in order into a new search), nothing is proposed again at any rung, and no configuration
    // measured with the full protocol climbs to the middle rung.
    const SearchSpace space = grid();
    HalvingPlan plan;
    plan.screens = { Fidelity { 3, 1 }, Fidelity { 10, 2 } };
    plan.eta = 3;
    MultiFidelitySearch search(makeStrategy("random", space, 5), plan);
    std::vector<Trial> history;
    for (std::size_t left = 14; left > 0; --left)
        for (const Trial& t : search.next(1, left)) {
            history.push_back(t);
            search.observe(t, bowl(space, t.index));
        }
    std::set<std::size_t> full;
    for (const Trial& t : history)
        if (t.rung == plan.fullRung())
            full.insert(t.index);
    ASSERT_GE(full.size(), 3u);
    MultiFidelitySearch resumed(makeStrategy("random", space, 5), plan);
    for (const Trial& t : history)
        resumed.observe(t, bowl(space, t.index));
    std::set<std::pair<std::size_t, std::size_t>> seen;
    for (const Trial& t : history)
        seen.insert({ t.index, t.rung });
    for (const Trial& t : runToEnd(resumed, space)) {
        EXPECT_TRUE(seen.insert({ t.index, t.rung }).second) << t.index << " at rung " << t.rung << " again";
        EXPECT_FALSE(t.rung == 1 && full.count(t.index)) << t.index << " climbs after its full evaluation";
    }
}
