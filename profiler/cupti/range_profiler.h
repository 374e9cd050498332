#pragma once
// Speed-of-light counters through CUPTI's range profiler, with no KernelLoop dependency (only CUPTI and the
// standard library): the trace-model API (profiler/cupti/capture.h) and the GPU worker (kernels/worker) both link
// it, so the worker gets the counters without kernels/ depending on the profiler module (or the reverse).
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace kl::prof::cupti {

struct RangeCounters {
    std::string rangeName; // CUPTI's auto-range name: the launch ordinal within the profiled call
    double durationNs = -1; // gpu__time_duration.sum
    double dramThroughputPct = -1; // dram__throughput.avg.pct_of_peak_sustained_elapsed
    double smThroughputPct = -1; // sm__throughput.avg.pct_of_peak_sustained_elapsed
    double achievedOccupancyPct = -1; // sm__warps_active.avg.pct_of_peak_sustained_active
    double dramBytes = -1; // dram__bytes_read.sum + dram__bytes_write.sum
};

struct RangeProfile {
    bool available = false;
    // Why no counters came back (permissions, no driver, no context ...); with available, a note such as dropped
    // ranges.
    std::string unavailableReason;
    std::size_t passes = 0; // replays of each kernel the metric set needed
    std::vector<RangeCounters> kernels; // in launch order
};

// Runs `launch` under the range profiler (one auto range per kernel, kernel replay: CUPTI saves and restores
// device memory and replays each kernel once per pass) on the calling thread's current CUDA context, and
// synchronises the context afterwards. Never throws for CUPTI failures: they become unavailableReason.
RangeProfile profileKernels(const std::function<void()>& launch, std::size_t maxKernels = 64);

} // namespace kl::prof::cupti
