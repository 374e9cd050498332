#pragma once
// Minimal CUPTI activity capture of kernel records (name, grid, block, start/end) for the worker: the
// referee compares what actually ran during verification with the launch plan, and the trace op returns
// the records for timeline views and for checking our event timings against CUPTI's.
#include "core/gpu_records.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kl::worker {

class CuptiKernelLog {
public:
    static CuptiKernelLog& instance();
    bool available() const; // false when built without CUPTI or it failed to start
    std::string error() const;
    void start(); // clears and enables kernel activity
    std::vector<KernelRecord> stop(); // flushes, disables, returns the records since start()
    std::size_t dropped() const;
};

} // namespace kl::worker
