#include "agent/tuner/search_space.h"

#include "core/errors.h"
#include "core/loop_device_limits.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>

namespace kl::tuner {

namespace {

    // One check of a configuration that reads only the parameters part's annotations name: its verdict ("" when
    // the configuration passes, else the rule) is computed once per combination of their values.
    class PartialCheck {
    public:
        PartialCheck(
            const KernelSpec& spec, const KernelSpec& part, std::function<std::string(const ParamValues&)> rule)
            : m_rule(std::move(rule))
        {
            std::set<std::string> named;
            auto name = [&](const Expr& e) {
                for (const auto& id : e.identifiers())
                    if (spec.param(id))
                        named.insert(id);
            };
            for (const auto& c : part.constraints)
                name(c.expr);
            for (const auto& l : part.launches) {
                name(l.sharedBytes);
                for (int d = 0; d < 3; ++d) {
                    name(l.grid[d]);
                    name(l.block[d]);
                    name(l.cluster[d]);
                }
            }
            m_params.assign(named.begin(), named.end());
        }
        const std::string& verdict(const ParamValues& p)
        {
            std::vector<std::int64_t> key;
            key.reserve(m_params.size());
            for (const auto& n : m_params)
                key.push_back(p.at(n));
            auto it = m_memo.find(key);
            if (it == m_memo.end())
                it = m_memo.emplace(std::move(key), m_rule(p)).first;
            return it->second;
        }

    private:
        std::vector<std::string> m_params;
        std::function<std::string(const ParamValues&)> m_rule;
        std::map<std::vector<std::int64_t>, std::string> m_memo;
    };

} // namespace

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
    // The checks in the order that names a pruned configuration's rule: every constraint on every shape, then the
    // device's (its architecture, then each launch line). Each reads only the parameters its expressions name, and
    // is computed once per combination of their values: a space that is the product of independent parts (two
    // kernels of one plan, each with its own parameters) costs the sum of the parts, not their product.
    std::vector<PartialCheck> checks;
    for (const auto& c : spec.constraints) {
        KernelSpec one = spec;
        one.constraints = { c };
        one.launches.clear();
        checks.emplace_back(spec, one, [&shapes, one](const ParamValues& p) -> std::string {
            for (const Shape& sh : shapes)
                if (!one.satisfies(p, sh.bindings()))
                    return "constraint";
            return "";
        });
    }
    auto deviceCheck = [&](const KernelSpec& part) {
        checks.emplace_back(spec, part, [&shapes, &device, part](const ParamValues& p) -> std::string {
            const auto why = checkDeviceLimits(part, p, shapes, device);
            return why ? why->rule : "";
        });
    };
    KernelSpec arch = spec;
    arch.launches.clear();
    deviceCheck(arch);
    for (const auto& l : spec.launches) {
        KernelSpec one = spec;
        one.constraints.clear();
        one.launches = { l };
        deviceCheck(one);
    }
    s.m_stats.afterConstraints = 0;
    for (const ParamValues& p : all) {
        std::string rule;
        for (auto& c : checks)
            if (rule = c.verdict(p); !rule.empty())
                break;
        if (rule != "constraint")
            ++s.m_stats.afterConstraints;
        if (!rule.empty()) {
            ++s.m_stats.prunedByRule[rule];
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

std::optional<std::size_t> SearchSpace::at(const std::vector<int>& valueIndices) const
{
    if (auto it = m_byIdx.find(valueIndices); it != m_byIdx.end())
        return it->second;
    return std::nullopt;
}

std::size_t SearchSpace::nearest(const std::vector<int>& valueIndices) const
{
    if (const auto exact = at(valueIndices))
        return *exact;
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
