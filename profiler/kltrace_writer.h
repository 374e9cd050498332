#pragma once
// Writes .kltrace lines (the format importKlTrace reads, documented in kltrace_import.cpp) from data KernelLoop
// already holds rather than from a live CUPTI collection: e.g. the worker's baseline-vs-candidate profile, whose
// two launch plans become two named GPU rows with their speed-of-light counters.
#include "core/gpu_records.h"
#include "profiler/trace.h"

#include <cstdint>
#include <string>

namespace kl::prof {

class KlTraceWriter {
public:
    KlTraceWriter(int64_t pid, const std::string& command);
    void device(const Device& d);
    void rowName(int32_t device, int64_t stream, const std::string& name);
    void kernel(const KernelRecord& k, int32_t device);
    // Counters of the ordinal-th kernel (by start time) of the GPU row (device, stream).
    void sol(const SolMetrics& m, int32_t device, int64_t stream, uint32_t ordinalInRow);
    void warning(const std::string& text);
    const std::string& text() const { return m_text; }

private:
    std::string m_text;
};

} // namespace kl::prof
