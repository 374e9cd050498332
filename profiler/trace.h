#pragma once
// The trace model shared by the importers, the analysis, the CLI and the GUI timeline.
// Events live in one packed array (32 bytes each); per-row lanes of non-overlapping events, sorted by start,
// give binary-search window queries and a level-of-detail query that merges sub-pixel events.
#include "core/device.h"
#include "core/gpu_records.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kl::prof {

using StrId = uint32_t;
inline constexpr uint32_t kNone = 0xffffffffu;

// Interned strings: each distinct name is stored once; events refer to it by a 32-bit id (0 = "").
class StringTable {
public:
    StringTable();
    StringTable(const StringTable&) = delete;
    StringTable& operator=(const StringTable&) = delete;
    StringTable(StringTable&&) = default;
    StringTable& operator=(StringTable&&) = default;

    StrId intern(std::string_view s);
    std::string_view view(StrId id) const { return id < m_views.size() ? m_views[id] : std::string_view {}; }
    std::optional<StrId> find(std::string_view s) const;
    size_t size() const { return m_views.size(); }
    size_t bytes() const;

private:
    std::deque<std::string> m_chunks; // stable storage: views point into these
    std::vector<std::string_view> m_views;
    std::unordered_map<std::string_view, StrId> m_index;
};

enum class EventKind : uint8_t {
    Kernel,
    Memcpy,
    Memset,
    RuntimeApi, // cudaLaunchKernel, cudaMemcpyAsync, ...
    DriverApi, // cuLaunchKernel, ...
    NvtxRange, // NVTX push/pop or start/end, PyTorch user_annotation
    NvtxMark,
    GpuAnnotation, // an NVTX / user range projected onto a GPU stream (PyTorch gpu_user_annotation)
    CpuOp, // PyTorch cpu_op, python functions, other CPU slices
    Sync, // synchronization records (cuda_sync, CUPTI SYNCHRONIZATION)
    Other,
};
const char* toString(EventKind k);
bool isGpuWork(EventKind k); // kernel, memcpy, memset

enum class RowKind : uint8_t { CpuThread, GpuStream };

// One timeline row: a CPU thread of a process, or a stream of a device.
struct Row {
    RowKind kind = RowKind::CpuThread;
    int64_t pid = 0; // process id, or for a GPU stream the owning process when known (else -1)
    int64_t tid = 0; // thread id, or stream id
    int32_t device = -1; // GPU rows: device index
    StrId name = 0; // "python3 [1234] thread 1234", "GPU 0 stream 7"
    // Lanes of non-overlapping events sorted by start; lane index = nesting depth for properly nested slices.
    std::vector<std::vector<uint32_t>> lanes;
};

// A GPU of the trace: the worker's device record (name, SM count, compute capability, memory; what a trace format
// carries of it) under the trace's device id.
struct Device : DeviceInfo {
    int32_t id = 0;
};

struct Process {
    int64_t pid = 0;
    std::string name;
};

struct Event {
    int64_t start = 0; // ns, trace clock
    int64_t end = 0; // ns, >= start
    StrId name = 0;
    uint32_t row = 0;
    // GPU work: index of its KernelInfo / MemOpInfo; API calls: the correlation id. Use Trace::correlation().
    uint32_t aux = 0;
    EventKind kind = EventKind::Other;
    uint8_t lane = 0;
    uint16_t category = 0; // interned category id when it fits (source-specific "cat"), else 0

    int64_t duration() const { return end - start; }
};
static_assert(sizeof(Event) == 32, "Event must stay packed: 10M events = 320 MB");

struct KernelInfo {
    uint32_t grid[3] = { 0, 0, 0 };
    uint32_t block[3] = { 0, 0, 0 };
    uint32_t registersPerThread = 0;
    uint32_t staticSharedMemory = 0;
    uint32_t dynamicSharedMemory = 0;
    uint32_t stream = 0;
    int32_t device = -1;
    uint32_t correlation = 0; // the launching API call's correlation id (0 = none)
    float estOccupancyPct = -1; // PyTorch "est. achieved occupancy %", -1 = unknown
};

struct MemOpInfo {
    uint64_t bytes = 0;
    StrId copyKind = 0; // "HtoD", "DtoH", "DtoD", "memset", ...
    uint32_t stream = 0;
    int32_t device = -1;
    uint32_t correlation = 0;
};

// Speed-of-light counters for one kernel execution, keyed by the kernel's event index.
struct SolMetrics : SolCounters {
    SolMetrics() = default;
    explicit SolMetrics(SolCounters counters, uint32_t kernelEvent = kNone)
        : SolCounters(std::move(counters))
        , event(kernelEvent)
    {
    }
    uint32_t event = kNone;
};

// The inputs of a framework op as the profiler recorded them: PyTorch's record_shapes ("Input Dims", "Input type"),
// or the "sizes = [...]" that torch.autograd.profiler.emit_nvtx writes into an NVTX range's name.
struct OpInputs {
    std::vector<std::vector<int64_t>> dims; // per input; empty for a scalar, a tensor list or an absent input
    std::vector<std::string> types; // per input: "c10::BFloat16", "Scalar", ""
};

// A drawable item of a level-of-detail query: one event, or a run of events merged because each is narrower
// than the requested resolution.
struct DrawItem {
    int64_t start = 0;
    int64_t end = 0;
    uint32_t event = kNone; // the (first) event
    uint32_t count = 1; // events merged into this item
};

struct TraceMeta {
    std::string source; // "chrome-json", "nsys-sqlite", "kltrace"
    std::string path;
    std::vector<std::string> warnings; // non-fatal: dropped records, unpaired ranges, ...
};

class Trace {
public:
    Trace() = default;
    Trace(Trace&&) = default;
    Trace& operator=(Trace&&) = default;

    // --- building (importers) ---
    StringTable& strings() { return m_strings; }
    const StringTable& strings() const { return m_strings; }
    uint32_t cpuRow(int64_t pid, int64_t tid);
    uint32_t gpuRow(int32_t device, int64_t stream);
    void setRowName(uint32_t row, std::string_view name);
    uint32_t addEvent(Event e, uint32_t correlation = 0); // returns the event index; not for GPU work
    uint32_t addKernel(Event e, const KernelInfo& k);
    uint32_t addMemOp(Event e, const MemOpInfo& m); // e.kind: Memcpy or Memset
    void addDevice(Device d);
    void setProcessName(int64_t pid, std::string_view name);
    void addLink(uint32_t launchEvent, uint32_t gpuEvent); // explicit flow (ac2g); correlation links are automatic
    void addSol(SolMetrics m) { m_sol.push_back(std::move(m)); }
    void setOpInputs(uint32_t event, OpInputs inputs) { m_opInputs[event] = std::move(inputs); }
    TraceMeta& meta() { return m_meta; }
    // Sorts lanes, resolves launch->GPU links by correlation, shifts time so the trace starts at 0.
    // Must be called once after the last add; queries are valid afterwards.
    void finalize();

    // --- queries ---
    const TraceMeta& meta() const { return m_meta; }
    size_t eventCount() const { return m_events.size(); }
    const Event& event(uint32_t i) const { return m_events[i]; }
    const std::vector<Event>& events() const { return m_events; }
    std::string_view name(const Event& e) const { return m_strings.view(e.name); }
    const KernelInfo* kernelInfo(const Event& e) const;
    const MemOpInfo* memOpInfo(const Event& e) const;
    uint32_t correlation(const Event& e) const; // launch call <-> GPU work id, 0 = none
    const std::vector<Row>& rows() const { return m_rows; }
    const std::vector<Device>& devices() const { return m_devices; }
    const std::vector<Process>& processes() const { return m_processes; }
    const std::vector<SolMetrics>& sol() const { return m_sol; }
    const OpInputs* opInputs(uint32_t event) const; // nullptr: none recorded
    size_t opInputsCount() const { return m_opInputs.size(); }
    int64_t startNs() const { return m_start; } // first event after finalize (0 after the shift)
    int64_t endNs() const { return m_end; }
    int64_t timeOffsetNs() const { return m_offset; } // original clock = trace time + offset
    // Time the row is busy: a GPU stream's union of kernels, copies and memsets (annotation ranges on it are not
    // work); a CPU thread's summed top-level slices.
    int64_t busyNs(uint32_t row) const;

    // Events of one lane overlapping [t0, t1] (inclusive), in start order; O(log n + k).
    std::vector<uint32_t> eventsInWindow(uint32_t row, uint32_t lane, int64_t t0, int64_t t1) const;
    // All lanes of a row.
    std::vector<uint32_t> eventsInWindow(uint32_t row, int64_t t0, int64_t t1) const;
    // Level of detail: events narrower than minWidthNs that lie within minWidthNs of each other merge into one
    // item. The work is proportional to the number of returned items (times log n), not to the events hidden.
    std::vector<DrawItem> drawItems(uint32_t row, uint32_t lane, int64_t t0, int64_t t1, int64_t minWidthNs) const;

    // launch call -> GPU work and back (kNone / empty when unknown).
    uint32_t launchOf(uint32_t gpuEvent) const;
    std::vector<uint32_t> gpuWorkOf(uint32_t launchEvent) const;
    size_t linkCount() const { return m_links.size(); }

    size_t memoryBytes() const; // approximate heap footprint

private:
    void dropOutliers(); // finalize(): events far from all the others, with a warning
    StringTable m_strings;
    std::vector<Event> m_events;
    std::vector<KernelInfo> m_kernels;
    std::vector<MemOpInfo> m_memOps;
    std::vector<Row> m_rows;
    std::vector<Device> m_devices;
    std::vector<Process> m_processes;
    std::vector<SolMetrics> m_sol;
    std::unordered_map<uint32_t, OpInputs> m_opInputs; // by event index
    std::unordered_map<uint64_t, uint32_t> m_rowIndex;
    struct Link {
        uint32_t launch;
        uint32_t gpu;
    };
    std::vector<Link> m_links; // sorted by gpu after finalize
    std::vector<Link> m_linksByLaunch;
    TraceMeta m_meta;
    int64_t m_start = 0;
    int64_t m_end = 0;
    int64_t m_offset = 0;
    bool m_finalized = false;
};

} // namespace kl::prof
