#pragma once
// Speed-of-light counters through CUPTI's range profiler, with no KernelLoop dependency but the header-only record
// types of core/gpu_records.h: the trace-model API (profiler/cupti/capture.h) and the GPU worker (kernels/worker)
// both link it, so the worker gets the counters without kernels/ depending on the profiler module (or the reverse).
#include "core/gpu_records.h"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace kl::prof::cupti {

struct RangeProfile {
    bool available = false;
    // Why no counters came back (permissions, no driver, no context ...); with available, a note such as dropped
    // ranges.
    std::string unavailableReason;
    std::size_t passes = 0; // replays of each kernel the metric set needed
    std::vector<SolCounters> kernels; // in launch order; name = CUPTI's auto-range name (the launch ordinal)
};

// Runs `launch` under the range profiler (one auto range per kernel, kernel replay: CUPTI saves and restores
// device memory and replays each kernel once per pass) on the calling thread's current CUDA context, and
// synchronises the context afterwards. Never throws for CUPTI failures: they become unavailableReason.
RangeProfile profileKernels(const std::function<void()>& launch, std::size_t maxKernels = 64);

} // namespace kl::prof::cupti
