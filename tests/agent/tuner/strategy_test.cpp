#include "agent/tuner/strategy.h"
#include "core/errors.h"
#include "tests/core/synthetic_evaluator.h"

#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <set>

using namespace kl;
using namespace kl::tuner;

namespace {

struct Landscape {
    Landscape()
        : spec(parseKernelSpec(testonly::kSyntheticTemplate))
        , space(SearchSpace::build(spec, evaluator.problem().verifyShapes, evaluator.device()))
    {
        for (std::size_t i = 0; i < space.size(); ++i) {
            double c = 0;
            for (const Shape& s : evaluator.problem().tuningShapes)
                c += s.weight * evaluator.latencyUs(space.config(i), s);
            cost.push_back(c);
        }
        best = *std::min_element(cost.begin(), cost.end());
    }
    // Evaluations a strategy needs to come within tolerance of the best; the space size when never.
    std::size_t evaluationsToReach(SearchStrategy& st, double tolerance, std::size_t batch = 1)
    {
        std::size_t n = 0;
        while (!st.exhausted()) {
            const auto picks = st.next(batch);
            if (picks.empty())
                break;
            for (std::size_t i : picks) {
                ++n;
                st.observe(i, cost[i]);
                if (cost[i] <= best * (1 + tolerance))
                    return n;
            }
        }
        return space.size();
    }
    testonly::SyntheticEvaluatorForTests evaluator;
    KernelSpec spec;
    SearchSpace space;
    std::vector<double> cost;
    double best = 0;
};

std::size_t median(std::vector<std::size_t> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

TEST(Strategy, EveryStrategyCoversTheSpaceWithoutRepeats)
{
    Landscape l;
    for (const std::string& name : strategyNames()) {
        auto st = makeStrategy(name, l.space, 7);
        std::set<std::size_t> seen;
        std::size_t guard = 0;
        while (!st->exhausted() && guard++ < 10 * l.space.size()) {
            const auto picks = st->next(3);
            ASSERT_FALSE(picks.empty()) << name << " stalled with results for all its proposals";
            for (std::size_t i : picks) {
                ASSERT_LT(i, l.space.size());
                EXPECT_TRUE(seen.insert(i).second) << name << " proposed " << i << " twice";
                // Failures mixed in: every seventh configuration "crashes".
                st->observe(i, i % 7 == 0 ? std::numeric_limits<double>::infinity() : l.cost[i]);
            }
        }
        EXPECT_EQ(seen.size(), l.space.size()) << name;
        EXPECT_TRUE(st->next(4).empty()) << name;
    }
}

TEST(Strategy, SameSeedSameSearch)
{
    Landscape l;
    for (const std::string& name : strategyNames()) {
        auto a = makeStrategy(name, l.space, 42);
        auto b = makeStrategy(name, l.space, 42);
        for (int step = 0; step < 30; ++step) {
            const auto pa = a->next(2);
            const auto pb = b->next(2);
            ASSERT_EQ(pa, pb) << name << " step " << step;
            for (std::size_t i : pa) {
                a->observe(i, l.cost[i]);
                b->observe(i, l.cost[i]);
            }
        }
    }
}

TEST(Strategy, GuidedStrategiesBeatRandomSearchOnAStructuredLandscape)
{
    Landscape l;
    std::map<std::string, std::size_t> med;
    for (const std::string& name : strategyNames()) {
        std::vector<std::size_t> runs;
        for (std::uint64_t seed = 1; seed <= 10; ++seed) {
            auto st = makeStrategy(name, l.space, seed);
            runs.push_back(l.evaluationsToReach(*st, 0.03));
        }
        med[name] = median(runs);
    }
    // The bowl has one basin; random search needs about a fraction of the space, the guided ones fewer.
    EXPECT_LT(med["bayes"], med["random"]);
    EXPECT_LT(med["anneal"], med["random"]);
    EXPECT_LE(med["genetic"], med["random"]);
    EXPECT_LT(med["bayes"], l.space.size() / 4);
}

TEST(Strategy, ModelBasedSurvivesOnlyFailures)
{
    Landscape l;
    auto st = makeStrategy("bayes", l.space, 3);
    for (int step = 0; step < 20; ++step)
        for (std::size_t i : st->next(1))
            st->observe(i, std::numeric_limits<double>::infinity());
    EXPECT_EQ(st->visitedCount(), 20u);
    EXPECT_FALSE(st->bestIndex());
}

TEST(Strategy, ResultsRecordedBeforeAResumeAreNotProposedAgain)
{
    Landscape l;
    auto st = makeStrategy("anneal", l.space, 5);
    for (std::size_t i = 0; i < l.space.size(); i += 2)
        st->observe(i, l.cost[i]);
    st->markVisited(1);
    std::set<std::size_t> proposed;
    while (!st->exhausted())
        for (std::size_t i : st->next(2)) {
            EXPECT_TRUE(i % 2 == 1 && i != 1) << i;
            proposed.insert(i);
            st->observe(i, l.cost[i]);
        }
    EXPECT_EQ(proposed.size(), l.space.size() / 2 - 1);
}

TEST(Strategy, UnknownNameIsAnInputErrorAndAliasesWork)
{
    Landscape l;
    EXPECT_THROW(makeStrategy("gradient-descent", l.space, 1), InputError);
    EXPECT_EQ(canonicalStrategyName("brute_force"), "exhaustive");
    EXPECT_EQ(canonicalStrategyName("bayes_opt"), "bayes");
    EXPECT_EQ(makeStrategy("simulated_annealing", l.space, 1)->name(), "anneal");
}

namespace {

// X and Y in 0..N-1, every combination valid.
SearchSpace grid(int n)
{
    std::vector<std::vector<std::int64_t>> values(2);
    std::vector<ParamValues> configs;
    for (int x = 0; x < n; ++x)
        for (int y = 0; y < n; ++y) {
            configs.push_back({ { "X", x }, { "Y", y } });
            values[0].push_back(x);
            values[1].push_back(y);
        }
    return SearchSpace::fromConfigs({ "X", "Y" }, values, configs);
}

} // namespace

TEST(Strategy, AnnealStepsFromTheBestOfFourRandomSeeds)
{
    const SearchSpace space = grid(12);
    const auto cost = [&](std::size_t i) { return 1.0 + static_cast<double>(space.config(i).at("X")); };
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        auto st = makeStrategy("anneal", space, seed);
        const auto seeds = st->next(8);
        ASSERT_EQ(seeds.size(), 4u) << "seed " << seed;
        for (std::size_t k = 0; k + 1 < seeds.size(); ++k)
            st->observe(seeds[k], cost(seeds[k]));
        EXPECT_TRUE(st->next(1).empty()) << "stepped before the last seed's result, seed " << seed;
        st->observe(seeds.back(), cost(seeds.back()));
        const std::size_t best = *std::min_element(
            seeds.begin(), seeds.end(), [&](std::size_t a, std::size_t b) { return cost(a) < cost(b); });
        const auto step = st->next(1);
        ASSERT_EQ(step.size(), 1u);
        const auto around = space.neighbours(best);
        EXPECT_NE(std::find(around.begin(), around.end(), step[0]), around.end())
            << "seed " << seed << ": " << step[0] << " is not next to the best seed " << best;
    }
}

TEST(Strategy, AnnealRepeatsAnImprovingStep)
{
    // Cost falls along X only, so a walk that keeps going the way that paid off runs straight down the slope;
    // one that picks among its (up to four) neighbours afresh each time wanders sideways along Y.
    const SearchSpace space = grid(16);
    const auto cost = [&](std::size_t i) { return std::pow(2.0, 15.0 - static_cast<double>(space.config(i).at("X"))); };
    std::vector<long> extra;
    for (std::uint64_t seed = 1; seed <= 40; ++seed) {
        auto st = makeStrategy("anneal", space, seed);
        std::int64_t seedX = -1;
        long n = 0;
        bool reached = false;
        while (!reached && !st->exhausted())
            for (std::size_t i : st->next(1)) {
                ++n;
                st->observe(i, cost(i));
                if (n <= 4)
                    seedX = std::max(seedX, space.config(i).at("X"));
                reached = reached || space.config(i).at("X") == 15;
            }
        // Evaluations after the seeds beyond the slope's remaining length.
        extra.push_back(std::max(0L, n - 4 - static_cast<long>(15 - seedX)));
    }
    std::sort(extra.begin(), extra.end());
    EXPECT_LE(extra[extra.size() / 2], 3);
}
