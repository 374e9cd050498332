#include "kernels/export/dispatch_plan.h"

#include "core/errors.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>

namespace kl::exporter {

const char* pointClassName(PointClass c)
{
    switch (c) {
    case PointClass::Win:
        return "win";
    case PointClass::Loss:
        return "loss";
    case PointClass::Neutral:
        return "neutral";
    }
    return "neutral";
}

bool DispatchRegion::contains(const std::vector<std::int64_t>& v) const
{
    if (v.size() != ranges.size())
        return false;
    for (std::size_t i = 0; i < v.size(); ++i)
        if (v[i] < ranges[i].lo || v[i] > ranges[i].hi)
            return false;
    return true;
}

std::string DispatchRegion::label(const std::vector<std::string>& dims) const
{
    std::string s;
    for (std::size_t i = 0; i < ranges.size() && i < dims.size(); ++i) {
        if (i)
            s += ", ";
        s += dims[i] + " in [" + std::to_string(ranges[i].lo) + ", " + std::to_string(ranges[i].hi) + "]";
    }
    return s;
}

std::vector<std::int64_t> DispatchPlan::valuesOf(const Shape& s) const
{
    std::vector<std::int64_t> v;
    for (const auto& d : dims) {
        const auto it = s.dims.find(d);
        if (it == s.dims.end())
            throw InputError("shape " + s.label() + " has no value for dim '" + d + "'");
        v.push_back(it->second);
    }
    return v;
}

bool DispatchPlan::inCandidateRegion(const Shape& s) const
{
    const auto v = valuesOf(s);
    for (const auto& r : candidateRegions)
        if (r.contains(v))
            return true;
    return false;
}

namespace {

    std::string fmtSpeedup(double s, double lo, double hi)
    {
        char buf[96];
        std::snprintf(buf, sizeof buf, "%.3gx [%.3g, %.3g]", s, lo, hi);
        return buf;
    }

    struct Item {
        std::vector<std::int64_t> v;
        bool win = false;
        double speedup = 0;
    };

    double gini(std::size_t wins, std::size_t n)
    {
        if (n == 0)
            return 0;
        const double p = static_cast<double>(wins) / static_cast<double>(n);
        return 2.0 * p * (1.0 - p) * static_cast<double>(n);
    }

    DispatchRegion boundingRegion(const std::vector<Item>& items, bool wantWins, std::size_t nDims)
    {
        DispatchRegion r;
        r.candidate = wantWins;
        r.ranges.assign(nDims, { std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min() });
        r.minSpeedup = std::numeric_limits<double>::infinity();
        r.maxSpeedup = 0;
        for (const auto& it : items) {
            if (it.win != wantWins)
                continue;
            for (std::size_t d = 0; d < nDims; ++d) {
                r.ranges[d].lo = std::min(r.ranges[d].lo, it.v[d]);
                r.ranges[d].hi = std::max(r.ranges[d].hi, it.v[d]);
            }
            (it.win ? r.wins : r.losses) += 1;
            r.minSpeedup = std::min(r.minSpeedup, it.speedup);
            r.maxSpeedup = std::max(r.maxSpeedup, it.speedup);
        }
        return r;
    }

    void split(std::vector<Item> items, std::size_t nDims, DispatchPlan& plan)
    {
        std::size_t wins = 0;
        for (const auto& it : items)
            wins += it.win ? 1 : 0;
        if (items.empty())
            return;
        if (wins == items.size()) {
            plan.candidateRegions.push_back(boundingRegion(items, true, nDims));
            return;
        }
        if (wins == 0) {
            plan.lossRegions.push_back(boundingRegion(items, false, nDims));
            return;
        }
        // Best single-dim threshold by weighted Gini impurity; ties keep the first dim and lowest threshold so
        // the table is deterministic.
        double best = gini(wins, items.size());
        std::size_t bestDim = nDims;
        std::int64_t bestCut = 0;
        for (std::size_t d = 0; d < nDims; ++d) {
            std::set<std::int64_t> values;
            for (const auto& it : items)
                values.insert(it.v[d]);
            for (auto cut = values.begin(); cut != values.end() && std::next(cut) != values.end(); ++cut) {
                std::size_t nl = 0, wl = 0;
                for (const auto& it : items) {
                    if (it.v[d] <= *cut) {
                        ++nl;
                        wl += it.win ? 1 : 0;
                    }
                }
                const double g = gini(wl, nl) + gini(wins - wl, items.size() - nl);
                if (g < best - 1e-12) {
                    best = g;
                    bestDim = d;
                    bestCut = *cut;
                }
            }
        }
        if (bestDim == nDims) {
            // No threshold separates anything (wins and losses at the same coordinates, or impurity cannot
            // drop): the whole leaf is a loss, which is the safe side.
            plan.lossRegions.push_back(boundingRegion(items, false, nDims));
            return;
        }
        std::vector<Item> left, right;
        for (auto& it : items)
            (it.v[bestDim] <= bestCut ? left : right).push_back(std::move(it));
        split(std::move(left), nDims, plan);
        split(std::move(right), nDims, plan);
    }

} // namespace

DispatchPlan buildDispatchPlan(const Problem& problem, const std::vector<ShapeResult>& shapes, double minSpeedup)
{
    DispatchPlan plan;
    for (const auto& d : problem.dims) {
        plan.dims.push_back(d.name);
        plan.validityRange.push_back({ d.min, d.max });
    }
    const std::size_t nDims = plan.dims.size();
    plan.verifiedRange.assign(
        nDims, { std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min() });
    std::vector<Item> items;
    bool anyCorrect = false;
    for (const auto& r : shapes) {
        DispatchPoint p;
        p.shape = r.shape;
        p.heldOut = r.heldOut;
        p.speedup = r.speedup;
        p.speedupCiLow = r.speedupCiLow > 0 ? r.speedupCiLow : r.speedup;
        p.speedupCiHigh = r.speedupCiHigh > 0 ? r.speedupCiHigh : r.speedup;
        const auto values = plan.valuesOf(r.shape);
        const bool timed = r.timing.has_value() && r.speedup > 0;
        if (!r.correct) {
            p.cls = PointClass::Loss;
            p.why = "incorrect";
        } else if (!timed) {
            p.cls = PointClass::Neutral;
            p.why = "verified, not timed";
        } else if (p.speedupCiLow > minSpeedup) {
            p.cls = PointClass::Win;
            p.why = "faster: " + fmtSpeedup(p.speedup, p.speedupCiLow, p.speedupCiHigh);
        } else {
            p.cls = PointClass::Loss;
            p.why = "not surely faster: " + fmtSpeedup(p.speedup, p.speedupCiLow, p.speedupCiHigh);
        }
        if (r.correct) {
            anyCorrect = true;
            for (std::size_t d = 0; d < nDims; ++d) {
                plan.verifiedRange[d].lo = std::min(plan.verifiedRange[d].lo, values[d]);
                plan.verifiedRange[d].hi = std::max(plan.verifiedRange[d].hi, values[d]);
            }
        }
        if (p.cls != PointClass::Neutral)
            items.push_back({ values, p.cls == PointClass::Win, p.speedup });
        plan.points.push_back(std::move(p));
    }
    if (!anyCorrect)
        plan.verifiedRange.clear();
    split(std::move(items), nDims, plan);
    auto byLo = [](const DispatchRegion& a, const DispatchRegion& b) {
        for (std::size_t i = 0; i < a.ranges.size(); ++i)
            if (a.ranges[i].lo != b.ranges[i].lo)
                return a.ranges[i].lo < b.ranges[i].lo;
        return false;
    };
    std::sort(plan.candidateRegions.begin(), plan.candidateRegions.end(), byLo);
    std::sort(plan.lossRegions.begin(), plan.lossRegions.end(), byLo);
    return plan;
}

} // namespace kl::exporter
