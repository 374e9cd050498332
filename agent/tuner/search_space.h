#pragma once
// The valid configurations of a kernel's declared parameter space for one problem on one device:
// the Cartesian product of the declared values, filtered by the spec's constraints on every shape and by
// what the device can launch. Strategies work on indices into it.
#include "core/device.h"
#include "core/kernel_spec.h"
#include "core/problem.h"

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kl::tuner {

struct SpaceStats {
    std::size_t declared = 0; // product of the value counts
    std::size_t afterConstraints = 0;
    std::size_t afterDevice = 0; // valid
    std::map<std::string, std::size_t> prunedByRule; // "constraint", "device.threads-per-block", ...
};

class SearchSpace {
public:
    SearchSpace() = default;
    // Throws InputError when the declared space is larger than maxDeclared or has no valid configuration.
    static SearchSpace build(const KernelSpec& spec, const std::vector<Shape>& shapes, const DeviceInfo& device,
        std::size_t maxDeclared = 2'000'000);
    // A space over explicit configurations (replay of recorded sweeps, tests).
    static SearchSpace fromConfigs(std::vector<std::string> names, std::vector<std::vector<std::int64_t>> values,
        std::vector<ParamValues> configs);

    std::size_t size() const { return m_configs.size(); }
    const ParamValues& config(std::size_t i) const { return m_configs.at(i); }
    std::optional<std::size_t> indexOf(const ParamValues& p) const;
    const std::vector<std::string>& names() const { return m_names; }
    std::size_t dimensions() const { return m_names.size(); }
    // Position of each parameter's value in its declared (sorted) list, scaled to [0, 1].
    const std::vector<double>& features(std::size_t i) const { return m_features.at(i); }
    // Valid configurations that differ from i in one parameter by one step of its value list; when there
    // are none, those that differ in one parameter by any amount.
    std::vector<std::size_t> neighbours(std::size_t i) const;
    // The valid configuration nearest to an arbitrary point in value-index space (for recombination).
    std::size_t nearest(const std::vector<int>& valueIndices) const;
    // The valid configuration at exactly these value indices, if there is one.
    std::optional<std::size_t> at(const std::vector<int>& valueIndices) const;
    std::vector<int> valueIndices(std::size_t i) const { return m_valueIdx.at(i); }
    const std::vector<std::int64_t>& values(std::size_t dim) const { return m_values.at(dim); }
    const SpaceStats& stats() const { return m_stats; }

private:
    void index();

    std::vector<std::string> m_names;
    std::vector<std::vector<std::int64_t>> m_values; // sorted ascending per parameter
    std::vector<ParamValues> m_configs;
    std::vector<std::vector<int>> m_valueIdx;
    std::vector<std::vector<double>> m_features;
    std::map<std::vector<int>, std::size_t> m_byIdx;
    SpaceStats m_stats;
};

} // namespace kl::tuner
