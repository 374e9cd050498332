#include "kernels/stats.h"

#include <algorithm>
#include <cmath>

namespace kl {

double percentile(std::vector<double> v, double q)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto hi = std::min(v.size() - 1, lo + 1);
    const double f = pos - static_cast<double>(lo);
    return v[lo] * (1 - f) + v[hi] * f;
}

void medianConfidence(std::vector<double> v, double* low, double* high)
{
    if (v.empty()) {
        *low = *high = 0;
        return;
    }
    std::sort(v.begin(), v.end());
    const double n = static_cast<double>(v.size());
    const double half = 0.98 * std::sqrt(n);
    const auto lo = static_cast<long>(std::floor(n / 2 - half));
    const auto hi = static_cast<long>(std::ceil(n / 2 + half));
    *low = v[static_cast<std::size_t>(std::clamp(lo, 0L, static_cast<long>(v.size()) - 1))];
    *high = v[static_cast<std::size_t>(std::clamp(hi - 1, 0L, static_cast<long>(v.size()) - 1))];
}

TimingStats summarize(const std::vector<double>& samplesUs, bool graphMode, int launchesPerSample)
{
    TimingStats t;
    t.samples = static_cast<int>(samplesUs.size());
    t.graphMode = graphMode;
    t.launchesPerSample = launchesPerSample;
    if (samplesUs.empty())
        return t;
    t.medianUs = percentile(samplesUs, 0.5);
    t.p10Us = percentile(samplesUs, 0.1);
    t.p90Us = percentile(samplesUs, 0.9);
    medianConfidence(samplesUs, &t.ciLowUs, &t.ciHighUs);
    return t;
}

double relativeHalfWidth(const TimingStats& t)
{
    if (t.medianUs <= 0)
        return 1e9;
    return (t.ciHighUs - t.ciLowUs) / 2 / t.medianUs;
}

} // namespace kl
