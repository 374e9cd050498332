#pragma once
// In-process CUPTI capture for the GPU worker: trace a candidate's launch plan once (never while timing it:
// tracing inflates CUDA-graph launches ~100x) and get a Trace back; and speed-of-light counters for a finished
// candidate through the CUPTI range profiler, where the device and driver allow counter collection.
#include "profiler/cupti/range_profiler.h"
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

// Speed-of-light counters come from cupti::profileKernels (profiler/cupti/range_profiler.h). This attaches them to
// the kernels of a trace of the same launch plan, matching by launch order.
void attachSol(Trace& trace, const cupti::RangeProfile& sol);

} // namespace kl::prof
