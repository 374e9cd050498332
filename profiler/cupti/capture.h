#pragma once
// In-process CUPTI capture for the GPU worker: trace a candidate's launch plan once (never while timing it:
// tracing inflates CUDA-graph launches ~100x) and get a Trace back; and speed-of-light counters for a finished
// candidate through the CUPTI range profiler, where the device and driver allow counter collection.
#include "profiler/trace.h"

#include <functional>
#include <string>
#include <vector>

namespace kl::prof {

struct CaptureOptions {
    bool runtimeApi = true;
    bool driverApi = true;
    bool memory = true;
};

class CuptiCapture {
public:
    explicit CuptiCapture(CaptureOptions opts = {});
    ~CuptiCapture(); // stops a running capture, discarding it
    CuptiCapture(const CuptiCapture&) = delete;
    CuptiCapture& operator=(const CuptiCapture&) = delete;

    // Throws std::runtime_error when CUPTI cannot start (another capture runs, CUPTI missing ...).
    void start();
    // Synchronise the device before calling (CUPTI's flush does not wait for running work).
    Trace stop();
    bool running() const { return m_running; }

private:
    CaptureOptions m_opts;
    bool m_running = false;
    std::string m_lines;
};

struct SolResult {
    bool available = false;
    std::string unavailableReason; // e.g. "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: counters are admin-only ..."
    size_t passes = 0;
    std::vector<SolMetrics> kernels; // in launch order; kernelName = CUPTI's range name (launch ordinal)
};

// Runs `launch` under the range profiler (one auto range per kernel, kernel replay: CUPTI saves and restores
// device memory and replays each kernel once per pass), on the calling thread's current CUDA context.
// Collects gpu__time_duration, dram/sm throughput % of peak, achieved occupancy and DRAM bytes.
SolResult measureSpeedOfLight(const std::function<void()>& launch, size_t maxKernels = 64);

// Attaches SOL results to the kernels of a trace of the same launch plan, matching by launch order.
void attachSol(Trace& trace, const SolResult& sol);

} // namespace kl::prof
