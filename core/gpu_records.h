#pragma once
// GPU record types shared by kernels/ (the worker, its protocol) and profiler/ (CUPTI, .kltrace, the trace model),
// which must not depend on each other: one kernel record and one set of speed-of-light counters for both.
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

// Speed-of-light counters of one kernel execution (CUPTI range profiler); -1 = not measured.
struct SolCounters {
    std::string name; // the kernel's name where known, else CUPTI's range name (the launch ordinal)
    double durationNs = -1; // gpu__time_duration.sum
    double dramThroughputPct = -1; // dram__throughput.avg.pct_of_peak_sustained_elapsed
    double smThroughputPct = -1; // sm__throughput.avg.pct_of_peak_sustained_elapsed
    double achievedOccupancyPct = -1; // sm__warps_active.avg.pct_of_peak_sustained_active
    double dramBytes = -1; // dram__bytes_read.sum + dram__bytes_write.sum
};

} // namespace kl
