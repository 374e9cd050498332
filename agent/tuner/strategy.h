#pragma once
// Search strategies over a SearchSpace. A strategy proposes configuration indices and learns their costs
// (lower is better; +infinity for a configuration that failed). It never proposes an index twice.
#include "agent/tuner/search_space.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace kl::tuner {

class SearchStrategy {
public:
    explicit SearchStrategy(const SearchSpace& space, std::uint64_t seed);
    virtual ~SearchStrategy() = default;
    virtual std::string name() const = 0;

    // Up to n unvisited indices to evaluate next (fewer while waiting for results it needs; none when the
    // space is exhausted). Proposed indices count as visited at once.
    std::vector<std::size_t> next(std::size_t n);
    // A result; also accepted for indices it never proposed (results recorded before a resume).
    void observe(std::size_t index, double cost);
    // Marks an index as taken without a result yet (a candidate in flight before a resume).
    void markVisited(std::size_t index);

    bool visited(std::size_t i) const { return m_visited.at(i); }
    std::size_t visitedCount() const { return m_visitedCount; }
    bool exhausted() const { return m_visitedCount >= m_space.size(); }
    std::optional<std::size_t> bestIndex() const { return m_best; }

protected:
    virtual std::vector<std::size_t> choose(std::size_t n) = 0;
    virtual void learn(std::size_t index, double cost) { (void)index, (void)cost; }

    std::size_t randomUnvisited();
    std::vector<std::size_t> unvisited() const;

    const SearchSpace& m_space;
    std::mt19937_64 m_rng;
    std::vector<bool> m_visited;
    std::size_t m_visitedCount = 0;
    std::vector<std::pair<std::size_t, double>> m_results; // in observation order
    std::optional<std::size_t> m_best;
    double m_bestCost = 0;
};

// exhaustive | random | anneal | genetic | bayes (aliases: brute_force, random_sample, simulated_annealing,
// genetic_algorithm, bayes_opt). Throws InputError on an unknown name.
std::unique_ptr<SearchStrategy> makeStrategy(const std::string& name, const SearchSpace& space, std::uint64_t seed);
const std::vector<std::string>& strategyNames();
std::string canonicalStrategyName(const std::string& name); // throws InputError

} // namespace kl::tuner
