#pragma once
// Bottleneck analysis of a Trace: per-kernel and per-range statistics, GPU busy/idle with the idle time
// attributed to its cause, launch-overhead phases, and a roofline class per kernel. The result is a plain value
// with a JSON form and a compact text rendering meant to be pasted into an agent prompt.
#include "core/profile_summary.h"
#include "profiler/trace.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kl::prof {

// Measured ceilings of a device (not datasheet peaks: the loop should compare against what is reachable).
struct Ceilings {
    std::string device;
    double dramBytesPerSec = 0; // copy-kernel bandwidth
    double fp32FlopsPerSec = 0; // FMA microbenchmark
    double tensorFlopsPerSec = 0; // dense bf16 GEMM
    double graphNodeNs = 500; // GPU time per node of a replayed CUDA graph (replaces a launch gap)
    static Ceilings h200(); // 4.27 TB/s, 56 TFLOP/s fp32, 790 TFLOP/s bf16 (H200, CUDA 13.0, measured)
    static Ceilings forDeviceName(const std::string& name); // h200() for an H200, else empty (unknown)
};

// Work of one launch of a kernel whose name contains `nameContains`, known from the problem definition.
struct KernelWork {
    std::string nameContains;
    double flops = 0;
    double bytes = 0;
    bool tensorCores = false;
};

struct AnalysisOptions {
    Ceilings ceilings; // empty device = pick from the trace's device name
    std::vector<KernelWork> work;
    size_t topKernels = 12;
    size_t topRanges = 12;
    int64_t shortKernelNs = 10'000; // "short" kernels for launch-overhead phases
    int64_t phaseBreakGapNs = 1'000'000; // a gap longer than this ends a phase
    size_t minPhaseKernels = 20;
    double minPhaseIdleFraction = 0.3;
};

struct Roofline {
    std::string bound = "unknown"; // memory-bound | compute-bound | latency-bound | balanced | unknown
    std::string basis; // "sol-counters" | "known-work" | ""
    double dramPct = -1; // of peak (SOL) or of the measured copy ceiling (known work)
    double computePct = -1;
    double arithmeticIntensity = -1; // FLOP/byte, known work only
};

struct KernelStat {
    std::string name;
    uint64_t count = 0;
    int64_t totalNs = 0;
    double meanNs = 0;
    double medianNs = 0;
    int64_t minNs = 0;
    int64_t maxNs = 0;
    double share = 0; // of all kernel time
    uint32_t grid[3] = { 0, 0, 0 };
    uint32_t block[3] = { 0, 0, 0 };
    uint32_t registersPerThread = 0;
    uint32_t sharedMemory = 0;
    double estOccupancyPct = -1;
    double achievedOccupancyPct = -1; // SOL counters
    Roofline roofline;
};

struct RangeStat {
    std::string name;
    uint64_t instances = 0; // ranges with this name
    int64_t cpuNs = 0; // summed range durations
    uint64_t kernels = 0; // kernels launched inside (inclusive of nested ranges)
    int64_t gpuNs = 0; // their GPU time
    double share = 0; // of all kernel time
};

struct IdleBreakdown {
    int64_t hostNs = 0; // the launching thread was busy elsewhere (Python, framework, CPU work)
    int64_t launchNs = 0; // the thread was inside launch calls (cudaLaunchKernel ...): launch overhead
    int64_t syncNs = 0; // the thread was blocked in a synchronizing call and only then issued the next work
    int64_t queuedNs = 0; // the next work was already enqueued: GPU-side launch latency / dependencies
    int64_t unattributedNs = 0; // no launch record for the next work
};

struct StreamBusy {
    int64_t stream = 0;
    int64_t busyNs = 0;
    double busyPct = 0;
    uint64_t items = 0;
};

struct DeviceBusy {
    int32_t device = 0;
    std::string name;
    int64_t windowNs = 0; // first GPU work start .. last GPU work end
    int64_t busyNs = 0; // union of GPU work
    double busyPct = 0;
    uint64_t gaps = 0;
    IdleBreakdown idle;
    uint64_t launches = 0; // GPU work items with a known launch call
    double medianLaunchApiNs = -1;
    double medianLaunchLatencyNs = -1; // launch call end -> work start
    std::vector<StreamBusy> streams;
};

struct LaunchPhase {
    int32_t device = 0;
    std::string label; // innermost NVTX/annotation range around the first launch, if any
    int64_t startNs = 0;
    int64_t endNs = 0;
    uint64_t kernels = 0;
    int64_t busyNs = 0;
    double medianKernelNs = 0;
    double medianGapNs = 0;
    double medianLaunchApiNs = -1;
    int64_t estimatedWithGraphsNs = 0; // busy + kernels * graph node cost
    double estimatedSpeedup = 1;
};

struct Analysis {
    std::string source;
    uint64_t events = 0;
    uint64_t kernelCount = 0;
    int64_t kernelNs = 0;
    int64_t traceNs = 0;
    Ceilings ceilings;
    std::vector<DeviceBusy> devices;
    std::vector<KernelStat> kernels; // top by total time
    uint64_t kernelNames = 0; // distinct names (kernels holds the top ones)
    std::vector<RangeStat> ranges;
    std::vector<LaunchPhase> launchPhases; // the worst ones, by idle time
    uint64_t launchPhaseCount = 0;
    int64_t launchPhaseIdleNs = 0; // idle inside all launch-bound phases
    // Host-attributed idle by the innermost CPU op (or range) running on the launching thread at the time.
    std::vector<std::pair<std::string, int64_t>> hostIdleByCpuOp; // top 5, largest first
    std::string bottleneck; // launch-overhead | host-bound | synchronization | memory-bound | compute-bound |
                            // latency-bound | gpu-bound | gpu-idle (idle, no CPU records to say why) | no-gpu-work
    std::vector<std::string> findings; // ordered, most important first
    std::vector<std::string> warnings;
};

Analysis analyze(const Trace& trace, const AnalysisOptions& opts = {});
// The class of a kernel from its DRAM and compute (SM) throughput: core's rule, shared with the agent's profile.
using kl::rooflineClass;
nlohmann::json toJson(const Analysis& a);
// Prompt-ready text, < ~40 lines: bottleneck first, then the figures supporting it.
std::string toText(const Analysis& a);

std::string formatNs(double ns); // "4.32 us", "12.1 ms"

} // namespace kl::prof
