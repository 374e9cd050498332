#include "kernels/shape_sampler.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace kl {

namespace {

    std::int64_t roundToMultiple(std::int64_t v, const DimSpec& d, bool up)
    {
        const std::int64_t m = std::max<std::int64_t>(1, d.multipleOf);
        std::int64_t r = up ? (v + m - 1) / m * m : v / m * m;
        if (r < d.min)
            r = (d.min + m - 1) / m * m;
        if (r > d.max)
            r = d.max / m * m;
        return r;
    }

    bool inside(const Regime* r, const Shape& s)
    {
        if (!r)
            return true;
        try {
            return r->contains(s);
        } catch (const ExprError&) {
            return false;
        }
    }

} // namespace

std::vector<Shape> extremeShapes(const Problem& p)
{
    std::vector<Shape> out;
    auto add = [&](const Shape& s) {
        if (p.shapeIsValid(s) && std::find(out.begin(), out.end(), s) == out.end())
            out.push_back(s);
    };
    Shape lo;
    for (const auto& d : p.dims)
        lo.dims[d.name] = roundToMultiple(d.min, d, true);
    add(lo);
    for (const auto& d : p.dims) {
        Shape s = lo;
        s.dims[d.name] = roundToMultiple(d.max, d, false);
        add(s);
    }
    Shape hi;
    for (const auto& d : p.dims)
        hi.dims[d.name] = roundToMultiple(d.max, d, false);
    add(hi);
    return out;
}

std::vector<Shape> randomShapes(const Problem& p, int count, std::uint64_t seed, const Regime* regime)
{
    std::vector<Shape> out;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    for (int i = 0; i < count; ++i) {
        for (int attempt = 0; attempt < 200; ++attempt) {
            Shape s;
            for (const auto& d : p.dims) {
                double v;
                if (d.logUniform && d.min > 0)
                    v = std::exp(std::log(static_cast<double>(d.min))
                        + u01(rng) * (std::log(static_cast<double>(d.max)) - std::log(static_cast<double>(d.min))));
                else
                    v = static_cast<double>(d.min) + u01(rng) * static_cast<double>(d.max - d.min);
                s.dims[d.name] = roundToMultiple(static_cast<std::int64_t>(std::llround(v)), d, u01(rng) < 0.5);
            }
            if (p.shapeIsValid(s) && inside(regime, s)) {
                out.push_back(s);
                break;
            }
        }
    }
    return out;
}

std::vector<Shape> heldOutShapes(
    const Problem& p, int randomCount, std::uint64_t seed, bool withExtremes, const Regime* regime)
{
    std::vector<Shape> out;
    if (withExtremes)
        for (const auto& s : extremeShapes(p))
            if (inside(regime, s))
                out.push_back(s);
    for (const auto& s : randomShapes(p, randomCount, seed, regime))
        if (std::find(out.begin(), out.end(), s) == out.end())
            out.push_back(s);
    return out;
}

} // namespace kl
