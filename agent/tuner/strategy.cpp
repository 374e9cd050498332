#include "agent/tuner/strategy.h"

#include "agent/tuner/gaussian_process.h"
#include "core/errors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <set>

namespace kl::tuner {

SearchStrategy::SearchStrategy(const SearchSpace& space, std::uint64_t seed)
    : m_space(space)
    , m_rng(seed)
    , m_visited(space.size(), false)
{
}

std::vector<std::size_t> SearchStrategy::next(std::size_t n)
{
    if (n == 0 || exhausted())
        return {};
    std::vector<std::size_t> picked = choose(std::min(n, m_space.size() - m_visitedCount));
    std::vector<std::size_t> out;
    for (std::size_t i : picked) {
        if (i >= m_space.size())
            continue;
        // choose() marks what it takes; anything else it returns is marked here.
        if (!m_visited[i]) {
            m_visited[i] = true;
            ++m_visitedCount;
        }
        if (std::find(out.begin(), out.end(), i) == out.end())
            out.push_back(i);
    }
    return out;
}

void SearchStrategy::markVisited(std::size_t index)
{
    if (index < m_visited.size() && !m_visited[index]) {
        m_visited[index] = true;
        ++m_visitedCount;
    }
}

void SearchStrategy::observe(std::size_t index, double cost)
{
    if (index >= m_space.size())
        return;
    markVisited(index);
    if (std::isnan(cost))
        cost = std::numeric_limits<double>::infinity();
    m_results.emplace_back(index, cost);
    if (std::isfinite(cost) && (!m_best || cost < m_bestCost)) {
        m_best = index;
        m_bestCost = cost;
    }
    learn(index, cost);
}

std::vector<std::size_t> SearchStrategy::unvisited() const
{
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < m_visited.size(); ++i)
        if (!m_visited[i])
            out.push_back(i);
    return out;
}

std::size_t SearchStrategy::randomUnvisited()
{
    const std::size_t left = m_space.size() - m_visitedCount;
    if (left == 0)
        return m_space.size();
    // Rejection sampling is fast while the space is mostly unvisited; a scan otherwise.
    if (left * 4 > m_space.size()) {
        std::uniform_int_distribution<std::size_t> d(0, m_space.size() - 1);
        for (;;) {
            const std::size_t i = d(m_rng);
            if (!m_visited[i]) {
                markVisited(i);
                return i;
            }
        }
    }
    std::uniform_int_distribution<std::size_t> d(0, left - 1);
    std::size_t k = d(m_rng);
    for (std::size_t i = 0; i < m_visited.size(); ++i)
        if (!m_visited[i] && k-- == 0) {
            markVisited(i);
            return i;
        }
    return m_space.size();
}

namespace {

    // The model the guided strategies share: a Gaussian process on log(cost) over the scaled value indices of the
    // measured configurations, failures entered as worse than anything measured. Exact inference is cubic in the
    // observations: past 160, the 100 best and the 60 latest. False when fewer than two costs are finite.
    bool fitSurrogate(
        const SearchSpace& space, const std::vector<std::pair<std::size_t, double>>& results, GaussianProcess& gp)
    {
        double worst = -std::numeric_limits<double>::infinity();
        std::size_t finite = 0;
        for (const auto& [i, c] : results)
            if (std::isfinite(c)) {
                worst = std::max(worst, std::log(c));
                ++finite;
            }
        if (finite < 2)
            return false;
        std::vector<std::pair<std::size_t, double>> train = results;
        if (train.size() > 160) {
            std::vector<std::pair<std::size_t, double>> latest(train.end() - 60, train.end());
            train.resize(train.size() - 60);
            std::partial_sort(train.begin(), train.begin() + 100, train.end(),
                [](const auto& a, const auto& b) { return a.second < b.second; });
            train.resize(100);
            train.insert(train.end(), latest.begin(), latest.end());
        }
        std::vector<std::vector<double>> X;
        std::vector<double> y;
        for (const auto& [i, c] : train) {
            X.push_back(space.features(i));
            y.push_back(std::isfinite(c) ? std::log(c) : worst + 1.0);
        }
        gp.fit(X, y);
        return true;
    }

    // Of several unmeasured candidates, the one the surrogate rates most promising (lowest mean less half a standard
    // deviation: optimistic where it knows little); the first when it has no model yet.
    std::size_t mostPromising(const SearchSpace& space, const GaussianProcess& gp, const std::vector<std::size_t>& cand)
    {
        if (!gp.fitted())
            return cand.front();
        std::size_t best = cand.front();
        double bestScore = std::numeric_limits<double>::infinity();
        for (std::size_t i : cand) {
            double mu, sd;
            gp.predict(space.features(i), mu, sd);
            if (mu - 0.5 * sd < bestScore) {
                bestScore = mu - 0.5 * sd;
                best = i;
            }
        }
        return best;
    }

    class ExhaustiveStrategy final : public SearchStrategy {
    public:
        using SearchStrategy::SearchStrategy;
        std::string name() const override { return "exhaustive"; }

    protected:
        std::vector<std::size_t> choose(std::size_t n) override
        {
            std::vector<std::size_t> out;
            for (; m_cursor < m_space.size() && out.size() < n; ++m_cursor)
                if (!m_visited[m_cursor]) {
                    markVisited(m_cursor);
                    out.push_back(m_cursor);
                }
            return out;
        }

    private:
        std::size_t m_cursor = 0;
    };

    class RandomStrategy final : public SearchStrategy {
    public:
        using SearchStrategy::SearchStrategy;
        std::string name() const override { return "random"; }

    protected:
        std::vector<std::size_t> choose(std::size_t n) override
        {
            std::vector<std::size_t> out;
            while (out.size() < n && !exhausted())
                out.push_back(randomUnvisited());
            return out;
        }
    };

    // Simulated annealing over the one-step neighbourhood, started from the best of a few random configurations.
    // A worse configuration is accepted with probability exp(-relative loss / T), T cooling geometrically; a step
    // that improved is repeated in the same direction before other neighbours are tried (kernel costs are mostly
    // monotone along one parameter). Stuck (every neighbour measured): restart from the best measured
    // configuration that still has unmeasured neighbours, else at random.
    class AnnealStrategy final : public SearchStrategy {
    public:
        using SearchStrategy::SearchStrategy;
        std::string name() const override { return "anneal"; }

    protected:
        std::vector<std::size_t> choose(std::size_t n) override
        {
            std::vector<std::size_t> out;
            while (out.size() < n && !exhausted()) {
                if (m_seeds < kSeeds && m_results.size() < kSeeds) {
                    const std::size_t i = randomUnvisited();
                    ++m_seeds;
                    m_pendingSeeds.insert(i);
                    out.push_back(i);
                    continue;
                }
                if (!m_pendingSeeds.empty())
                    break; // the walk starts from the best seed, so it waits for all of them
                std::optional<std::size_t> pick = repeatedStep();
                if (!pick)
                    pick = neighbourOf(m_current);
                if (!pick && m_current)
                    if (auto open = bestOpenPoint()) {
                        m_current = open->first;
                        m_currentCost = open->second;
                        pick = neighbourOf(m_current);
                    }
                if (pick) {
                    m_origin[*pick] = *m_current;
                } else {
                    if (!m_pendingRestart.empty())
                        break; // wait for the restart point's result before wandering further
                    pick = randomUnvisited();
                    m_pendingRestart.insert(*pick);
                }
                out.push_back(*pick);
            }
            return out;
        }

        void learn(std::size_t index, double cost) override
        {
            const bool seed = m_pendingSeeds.erase(index) > 0;
            const bool restart = m_pendingRestart.erase(index) > 0;
            std::optional<std::size_t> origin;
            if (auto it = m_origin.find(index); it != m_origin.end()) {
                origin = it->second;
                m_origin.erase(it);
            }
            const bool improves = std::isfinite(cost) && (!std::isfinite(m_currentCost) || cost < m_currentCost);
            bool accept = !m_current || improves || restart;
            if (!accept && !seed && std::isfinite(cost)) {
                const double loss = (cost - m_currentCost) / m_currentCost;
                accept = std::uniform_real_distribution<double>(0, 1)(m_rng) < std::exp(-loss / m_temperature);
            }
            const bool steppedFromCurrent = origin && origin == m_current;
            m_momentum.clear();
            if (accept) {
                if (improves && steppedFromCurrent) {
                    const std::vector<int> from = m_space.valueIndices(*origin), to = m_space.valueIndices(index);
                    for (std::size_t d = 0; d < to.size(); ++d)
                        m_momentum.push_back(to[d] - from[d]);
                }
                m_current = index;
                m_currentCost = cost;
            }
            if (!seed)
                m_temperature = std::max(0.002, m_temperature * 0.93);
        }

    private:
        static constexpr int kSeeds = 4;

        // The configuration one more step along the last improving step, when it is valid and unmeasured.
        std::optional<std::size_t> repeatedStep()
        {
            if (!m_current || m_momentum.empty())
                return std::nullopt;
            std::vector<int> next = m_space.valueIndices(*m_current);
            for (std::size_t d = 0; d < next.size(); ++d)
                next[d] += m_momentum[d];
            const std::optional<std::size_t> i = m_space.at(next);
            if (!i || m_visited[*i])
                return std::nullopt;
            markVisited(*i);
            return i;
        }

        std::optional<std::size_t> neighbourOf(std::optional<std::size_t> base)
        {
            if (!base)
                return std::nullopt;
            std::vector<std::size_t> cand;
            for (std::size_t j : m_space.neighbours(*base))
                if (!m_visited[j])
                    cand.push_back(j);
            if (cand.empty())
                return std::nullopt;
            const std::size_t pick = cand[std::uniform_int_distribution<std::size_t>(0, cand.size() - 1)(m_rng)];
            markVisited(pick);
            return pick;
        }

        std::optional<std::pair<std::size_t, double>> bestOpenPoint() const
        {
            std::vector<std::pair<std::size_t, double>> measured;
            for (const auto& r : m_results)
                if (std::isfinite(r.second))
                    measured.push_back(r);
            std::sort(
                measured.begin(), measured.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
            for (const auto& r : measured)
                for (std::size_t j : m_space.neighbours(r.first))
                    if (!m_visited[j])
                        return r;
            return std::nullopt;
        }

        int m_seeds = 0;
        std::optional<std::size_t> m_current;
        double m_currentCost = std::numeric_limits<double>::infinity();
        double m_temperature = 0.05;
        std::vector<int> m_momentum;
        std::map<std::size_t, std::size_t> m_origin; // proposed step -> the configuration it stepped from
        std::set<std::size_t> m_pendingSeeds;
        std::set<std::size_t> m_pendingRestart;
    };

    // A steady-state genetic algorithm: tournament selection from the best measured configurations, uniform
    // crossover in value-index space, per-parameter mutation, projection onto the nearest valid configuration.
    // Each pair of parents makes a brood of up to 8 distinct children and the surrogate picks the one to measure
    // (surrogate-assisted evolution: fewer evaluations to the best on the recorded spaces, bench/results/round13).
    // Evolution starts after half a population of random configurations: the surrogate-picked broods find the
    // basin sooner than more random draws do (bench/results/round14).
    class GeneticStrategy final : public SearchStrategy {
    public:
        GeneticStrategy(const SearchSpace& space, std::uint64_t seed)
            : SearchStrategy(space, seed)
            , m_population(std::clamp<std::size_t>(space.size() / 40, 6, 16))
            , m_initial(std::max<std::size_t>(4, m_population / 2))
        {
        }
        std::string name() const override { return "genetic"; }

    protected:
        std::vector<std::size_t> choose(std::size_t n) override
        {
            std::vector<std::size_t> out;
            GaussianProcess gp; // fitted once per call: the brood of every child this call makes is ranked by it
            if (m_visitedCount >= m_initial)
                fitSurrogate(m_space, m_results, gp);
            while (out.size() < n && !exhausted()) {
                std::vector<std::pair<double, std::size_t>> pool;
                for (const auto& [i, c] : m_results)
                    if (std::isfinite(c))
                        pool.emplace_back(c, i);
                if (m_visitedCount < m_initial || pool.size() < 2) {
                    out.push_back(randomUnvisited());
                    continue;
                }
                std::sort(pool.begin(), pool.end());
                if (pool.size() > m_population)
                    pool.resize(m_population);
                auto tournament = [&] {
                    std::uniform_int_distribution<std::size_t> d(0, pool.size() - 1);
                    std::size_t best = d(m_rng);
                    for (int k = 0; k < 2; ++k)
                        best = std::min(best, d(m_rng));
                    return pool[best].second;
                };
                const std::vector<int> a = m_space.valueIndices(tournament());
                const std::vector<int> b = m_space.valueIndices(tournament());
                std::optional<std::size_t> child;
                std::vector<std::size_t> brood;
                constexpr std::size_t kBrood = 8;
                const double mutation = 1.0 / static_cast<double>(std::max<std::size_t>(1, a.size()));
                for (int attempt = 0; attempt < 24 && brood.size() < kBrood; ++attempt) {
                    std::vector<int> v(a.size());
                    std::uniform_real_distribution<double> u(0, 1);
                    for (std::size_t d = 0; d < a.size(); ++d) {
                        v[d] = u(m_rng) < 0.5 ? a[d] : b[d];
                        if (u(m_rng) < mutation * (1.0 + attempt / 4.0)) {
                            const int count = static_cast<int>(m_space.values(d).size());
                            if (u(m_rng) < 0.6)
                                v[d] = std::clamp(v[d] + (u(m_rng) < 0.5 ? -1 : 1), 0, count - 1);
                            else
                                v[d] = std::uniform_int_distribution<int>(0, count - 1)(m_rng);
                        }
                    }
                    const std::size_t i = m_space.nearest(v);
                    if (!m_visited[i] && std::find(brood.begin(), brood.end(), i) == brood.end())
                        brood.push_back(i);
                }
                if (!brood.empty())
                    child = mostPromising(m_space, gp, brood);
                if (!child)
                    child = randomUnvisited();
                markVisited(*child);
                out.push_back(*child);
            }
            return out;
        }

    private:
        std::size_t m_population; // parents drawn from the best this many
        std::size_t m_initial; // random configurations before the first brood
    };

    // Bayesian optimization: a Gaussian process on log(cost) over the scaled value indices, expected
    // improvement maximized over the unmeasured configurations; a batch is spread by penalizing points near
    // those already picked. Failed configurations enter the model as worse than anything measured.
    class BayesStrategy final : public SearchStrategy {
    public:
        BayesStrategy(const SearchSpace& space, std::uint64_t seed)
            : SearchStrategy(space, seed)
            , m_initial(std::min<std::size_t>(space.size(), std::max<std::size_t>(6, 2 * space.dimensions())))
        {
        }
        std::string name() const override { return "bayes"; }

    protected:
        std::vector<std::size_t> choose(std::size_t n) override
        {
            std::vector<std::size_t> out;
            std::size_t finite = 0;
            for (const auto& r : m_results)
                finite += std::isfinite(r.second) ? 1 : 0;
            while (out.size() < n && m_visitedCount < m_initial && !exhausted())
                out.push_back(randomUnvisited());
            if (out.size() >= n || exhausted())
                return out;
            if (finite < 2) {
                // Nothing to model yet: keep sampling, but only once the initial design has reported.
                if (m_results.size() >= m_visitedCount)
                    out.push_back(randomUnvisited());
                return out;
            }

            fitSurrogate(m_space, m_results, m_gp);
            const double yBest = std::log(m_bestCost);

            std::vector<std::size_t> cand = unvisited();
            if (cand.size() > 4000) {
                std::shuffle(cand.begin(), cand.end(), m_rng);
                cand.resize(4000);
                if (m_best)
                    for (std::size_t j : m_space.neighbours(*m_best))
                        if (!m_visited[j])
                            cand.push_back(j);
            }
            std::vector<double> ei(cand.size());
            for (std::size_t k = 0; k < cand.size(); ++k) {
                double mu, sd;
                m_gp.predict(m_space.features(cand[k]), mu, sd);
                const double imp = yBest - mu - 0.01;
                if (sd < 1e-9) {
                    ei[k] = std::max(imp, 0.0);
                    continue;
                }
                const double z = imp / sd;
                const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
                const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * std::numbers::pi);
                ei[k] = imp * cdf + sd * pdf;
            }
            const double l2 = m_gp.lengthScale() * m_gp.lengthScale();
            while (out.size() < n && !cand.empty()) {
                const std::size_t k = static_cast<std::size_t>(std::max_element(ei.begin(), ei.end()) - ei.begin());
                const std::size_t pick = cand[k];
                markVisited(pick);
                out.push_back(pick);
                const auto& fp = m_space.features(pick);
                for (std::size_t j = 0; j < cand.size(); ++j) {
                    double d2 = 0;
                    const auto& fj = m_space.features(cand[j]);
                    for (std::size_t d = 0; d < fj.size(); ++d)
                        d2 += (fj[d] - fp[d]) * (fj[d] - fp[d]);
                    ei[j] *= 1.0 - std::exp(-0.5 * d2 / l2);
                }
                cand.erase(cand.begin() + static_cast<std::ptrdiff_t>(k));
                ei.erase(ei.begin() + static_cast<std::ptrdiff_t>(k));
            }
            return out;
        }

    private:
        std::size_t m_initial;
        GaussianProcess m_gp;
    };

} // namespace

const std::vector<std::string>& strategyNames()
{
    static const std::vector<std::string> names { "exhaustive", "random", "anneal", "genetic", "bayes" };
    return names;
}

std::string canonicalStrategyName(const std::string& name)
{
    static const std::vector<std::pair<std::string, std::string>> aliases { { "exhaustive", "exhaustive" },
        { "brute_force", "exhaustive" }, { "random", "random" }, { "random_sample", "random" }, { "anneal", "anneal" },
        { "simulated_annealing", "anneal" }, { "genetic", "genetic" }, { "genetic_algorithm", "genetic" },
        { "bayes", "bayes" }, { "bayes_opt", "bayes" }, { "bo", "bayes" } };
    for (const auto& [alias, canonical] : aliases)
        if (alias == name)
            return canonical;
    throw InputError("unknown tuner strategy '" + name + "' (known: exhaustive, random, anneal, genetic, bayes)");
}

std::unique_ptr<SearchStrategy> makeStrategy(const std::string& name, const SearchSpace& space, std::uint64_t seed)
{
    const std::string c = canonicalStrategyName(name);
    if (c == "exhaustive")
        return std::make_unique<ExhaustiveStrategy>(space, seed);
    if (c == "random")
        return std::make_unique<RandomStrategy>(space, seed);
    if (c == "anneal")
        return std::make_unique<AnnealStrategy>(space, seed);
    if (c == "genetic")
        return std::make_unique<GeneticStrategy>(space, seed);
    return std::make_unique<BayesStrategy>(space, seed);
}

} // namespace kl::tuner
