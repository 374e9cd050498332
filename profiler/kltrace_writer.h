#pragma once
// Writes .kltrace lines (the format importKlTrace reads, documented in kltrace_import.cpp) from data KernelLoop
// already holds rather than from a live CUPTI collection: e.g. the worker's baseline-vs-candidate profile, whose
// two launch plans become two named GPU rows with their speed-of-light counters.
#include "profiler/trace.h"

#include <cstdint>
#include <string>

namespace kl::prof {

struct KlKernelLine {
    int64_t startNs = 0;
    int64_t endNs = 0;
    int32_t device = 0;
    int64_t stream = 0;
    uint32_t correlation = 0;
    std::string name;
    uint32_t grid[3] = { 1, 1, 1 };
    uint32_t block[3] = { 1, 1, 1 };
    uint32_t registersPerThread = 0;
    uint32_t staticSharedMemory = 0;
    uint32_t dynamicSharedMemory = 0;
};

class KlTraceWriter {
public:
    KlTraceWriter(int64_t pid, const std::string& command);
    void device(const Device& d);
    void rowName(int32_t device, int64_t stream, const std::string& name);
    void kernel(const KlKernelLine& k);
    // Counters of the ordinal-th kernel (by start time) of the GPU row (device, stream).
    void sol(const SolMetrics& m, int32_t device, int64_t stream, uint32_t ordinalInRow);
    void warning(const std::string& text);
    const std::string& text() const { return m_text; }

private:
    std::string m_text;
};

} // namespace kl::prof
