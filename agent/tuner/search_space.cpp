#include "agent/tuner/search_space.h"

#include "core/errors.h"
#include "core/loop_device_limits.h"

#include <algorithm>
#include <limits>

namespace kl::tuner {

SearchSpace SearchSpace::build(
    const KernelSpec& spec, const std::vector<Shape>& shapes, const DeviceInfo& device, std::size_t maxDeclared)
{
    SearchSpace s;
    for (const ParamSpec& p : spec.params) {
        s.m_names.push_back(p.name);
        std::vector<std::int64_t> v = p.values.empty() ? std::vector<std::int64_t> { p.defaultValue } : p.values;
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
        s.m_values.push_back(std::move(v));
    }
    s.m_stats.declared = spec.spaceSize();
    if (s.m_stats.declared > maxDeclared)
        throw InputError("the declared parameter space has " + std::to_string(s.m_stats.declared)
            + " configurations, more than the tuner enumerates (" + std::to_string(maxDeclared)
            + "); narrow the @kl:param value lists");
    const std::vector<ParamValues> all = spec.enumerateSpace(maxDeclared);
    s.m_stats.afterConstraints = 0;
    for (const ParamValues& p : all) {
        bool ok = true;
        for (const Shape& sh : shapes)
            if (!spec.satisfies(p, sh.bindings())) {
                ok = false;
                break;
            }
        if (!ok) {
            ++s.m_stats.prunedByRule["constraint"];
            continue;
        }
        ++s.m_stats.afterConstraints;
        if (auto why = checkDeviceLimits(spec, p, shapes, device)) {
            ++s.m_stats.prunedByRule[why->rule];
            continue;
        }
        s.m_configs.push_back(p);
    }
    s.m_stats.prunedByRule["constraint"] += s.m_stats.declared - all.size();
    s.m_stats.afterDevice = s.m_configs.size();
    if (s.m_configs.empty())
        throw InputError("no configuration of the declared parameters satisfies the constraints and fits the device ("
            + std::to_string(s.m_stats.declared) + " declared)");
    s.index();
    return s;
}

SearchSpace SearchSpace::fromConfigs(
    std::vector<std::string> names, std::vector<std::vector<std::int64_t>> values, std::vector<ParamValues> configs)
{
    SearchSpace s;
    s.m_names = std::move(names);
    s.m_values = std::move(values);
    for (auto& v : s.m_values) {
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
    }
    s.m_configs = std::move(configs);
    s.m_stats.declared = s.m_stats.afterConstraints = s.m_stats.afterDevice = s.m_configs.size();
    s.index();
    return s;
}

void SearchSpace::index()
{
    m_valueIdx.clear();
    m_features.clear();
    m_byIdx.clear();
    for (std::size_t i = 0; i < m_configs.size(); ++i) {
        std::vector<int> idx;
        std::vector<double> f;
        for (std::size_t d = 0; d < m_names.size(); ++d) {
            const auto& vals = m_values[d];
            const auto it = m_configs[i].find(m_names[d]);
            const std::int64_t v = it == m_configs[i].end() ? vals.front() : it->second;
            const auto pos = std::lower_bound(vals.begin(), vals.end(), v);
            const int k = pos == vals.end() || *pos != v ? 0 : static_cast<int>(pos - vals.begin());
            idx.push_back(k);
            f.push_back(vals.size() > 1 ? static_cast<double>(k) / static_cast<double>(vals.size() - 1) : 0.0);
        }
        m_byIdx.emplace(idx, i);
        m_valueIdx.push_back(std::move(idx));
        m_features.push_back(std::move(f));
    }
}

std::optional<std::size_t> SearchSpace::indexOf(const ParamValues& p) const
{
    std::vector<int> idx;
    for (std::size_t d = 0; d < m_names.size(); ++d) {
        const auto it = p.find(m_names[d]);
        if (it == p.end())
            return std::nullopt;
        const auto& vals = m_values[d];
        const auto pos = std::lower_bound(vals.begin(), vals.end(), it->second);
        if (pos == vals.end() || *pos != it->second)
            return std::nullopt;
        idx.push_back(static_cast<int>(pos - vals.begin()));
    }
    const auto f = m_byIdx.find(idx);
    if (f == m_byIdx.end())
        return std::nullopt;
    return f->second;
}

std::vector<std::size_t> SearchSpace::neighbours(std::size_t i) const
{
    std::vector<std::size_t> out;
    const std::vector<int>& base = m_valueIdx.at(i);
    for (std::size_t d = 0; d < base.size(); ++d)
        for (int step : { -1, 1 }) {
            std::vector<int> n = base;
            n[d] += step;
            if (n[d] < 0 || n[d] >= static_cast<int>(m_values[d].size()))
                continue;
            if (auto it = m_byIdx.find(n); it != m_byIdx.end())
                out.push_back(it->second);
        }
    if (!out.empty())
        return out;
    for (std::size_t d = 0; d < base.size(); ++d)
        for (int k = 0; k < static_cast<int>(m_values[d].size()); ++k) {
            if (k == base[d])
                continue;
            std::vector<int> n = base;
            n[d] = k;
            if (auto it = m_byIdx.find(n); it != m_byIdx.end())
                out.push_back(it->second);
        }
    return out;
}

std::size_t SearchSpace::nearest(const std::vector<int>& valueIndices) const
{
    if (auto it = m_byIdx.find(valueIndices); it != m_byIdx.end())
        return it->second;
    std::size_t best = 0;
    double bestDist = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < m_valueIdx.size(); ++i) {
        double dist = 0;
        for (std::size_t d = 0; d < valueIndices.size() && d < m_valueIdx[i].size(); ++d) {
            const double span = std::max<double>(1.0, static_cast<double>(m_values[d].size() - 1));
            const double diff = (m_valueIdx[i][d] - valueIndices[d]) / span;
            dist += diff * diff;
        }
        if (dist < bestDist) {
            bestDist = dist;
            best = i;
        }
    }
    return best;
}

} // namespace kl::tuner
