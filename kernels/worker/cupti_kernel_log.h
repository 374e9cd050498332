#pragma once
// Minimal CUPTI activity capture of kernel records (name, grid, block, start/end) for the worker: the
// referee compares what actually ran during verification with the launch plan, and the trace op returns
// the records for timeline views and for checking our event timings against CUPTI's.
#include <cstdint>
#include <string>
#include <vector>

namespace kl::worker {

struct KernelRecord {
    std::string name; // mangled
    std::uint64_t startNs = 0;
    std::uint64_t endNs = 0;
    int grid[3] = {1, 1, 1};
    int block[3] = {1, 1, 1};
    int registers = 0;
    int staticShared = 0;
    int dynamicShared = 0;
    std::uint32_t streamId = 0;
    std::uint32_t correlationId = 0;
    bool deviceLaunched = false;
};

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
