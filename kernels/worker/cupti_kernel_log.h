#pragma once
// Minimal CUPTI activity capture of kernel records (name, grid, block, start/end) for the worker: the
// referee compares what actually ran during verification with the launch plan, and the trace op returns
// the records for timeline views and for checking our event timings against CUPTI's.
#include "kernels/plan_profile.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kl::worker {

// The worker records what the client reads back (kernels/plan_profile.h): one type on both sides of the protocol.
using KernelRecord = kl::TracedKernel;

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
