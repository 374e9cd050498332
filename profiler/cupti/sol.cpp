// measureSpeedOfLight: the range profiler's counters (profiler/cupti/range_profiler.h) as the trace model's
// SolMetrics.
#include "profiler/cupti/capture.h"
#include "profiler/cupti/range_profiler.h"

namespace kl::prof {

SolResult measureSpeedOfLight(const std::function<void()>& launch, size_t maxKernels)
{
    const cupti::RangeProfile p = cupti::profileKernels(launch, maxKernels);
    SolResult res;
    res.available = p.available;
    res.unavailableReason = p.unavailableReason;
    res.passes = p.passes;
    for (const auto& k : p.kernels) {
        SolMetrics m;
        m.kernelName = k.rangeName;
        m.durationNs = k.durationNs;
        m.dramThroughputPct = k.dramThroughputPct;
        m.smThroughputPct = k.smThroughputPct;
        m.achievedOccupancyPct = k.achievedOccupancyPct;
        m.dramBytes = k.dramBytes;
        res.kernels.push_back(std::move(m));
    }
    return res;
}

} // namespace kl::prof
