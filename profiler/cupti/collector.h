#pragma once
// CUPTI activity collector shared by the injection library (kloop profile) and the in-process capture API.
// It turns activity records into .kltrace lines (format: profiler/kltrace_import.cpp) and hands them to a sink
// as buffers complete, so a crashed target still leaves every flushed record on disk.
#include <cstdint>
#include <functional>
#include <string>

namespace kl::prof::cupti {

struct CollectorOptions {
    bool runtimeApi = true;
    bool driverApi = true;
    bool memory = true; // memcpy + memset
    bool markers = true; // NVTX (needs NVTX injection, see inject.cpp)
    bool devices = true;
    uint32_t flushPeriodMs = 0; // > 0: CUPTI delivers buffers periodically (crash safety for kloop profile)
};

using LineSink = std::function<void(const std::string& lines)>;

// Starts collection (CUPTI callbacks are process-global: one collection at a time). Returns "" or an error text.
std::string startCollection(const CollectorOptions& opts, LineSink sink);
// Flushes all buffers (including incomplete ones) to the sink; call after synchronizing the device.
std::string flushCollection();
// Disables the activity kinds and flushes. Returns "" or an error.
std::string stopCollection();
bool collectionActive();
uint64_t droppedRecords();

// The .kltrace header line for this process.
std::string headerLine(int64_t pid, const std::string& command);
std::string jsonEscape(const std::string& s);

} // namespace kl::prof::cupti
