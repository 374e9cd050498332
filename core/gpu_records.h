#pragma once
// GPU record types shared by kernels/ (the worker, its protocol) and profiler/ (.kltrace writer), which must not
// depend on each other: one kernel record for both.
#include <cstdint>
#include <string>

namespace kl {

// One kernel execution as CUPTI's kernel activity reports it.
struct KernelRecord {
    std::string name; // mangled, as CUPTI reports it
    std::uint64_t startNs = 0; // CUPTI timestamps
    std::uint64_t endNs = 0;
    int grid[3] = { 1, 1, 1 };
    int block[3] = { 1, 1, 1 };
    int registers = 0;
    int staticShared = 0;
    int dynamicShared = 0;
    std::uint32_t stream = 0;
    std::uint32_t correlation = 0;
    bool deviceLaunched = false;
};

} // namespace kl
