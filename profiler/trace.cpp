#include "profiler/trace.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>

namespace kl::prof {

StringTable::StringTable()
{
    intern("");
}

StrId StringTable::intern(std::string_view s)
{
    if (auto it = m_index.find(s); it != m_index.end())
        return it->second;
    // Strings are appended to 64 KiB chunks so the views stay valid while the table grows.
    constexpr size_t kChunk = 64 * 1024;
    if (m_chunks.empty() || m_chunks.back().capacity() - m_chunks.back().size() < s.size()) {
        m_chunks.emplace_back();
        m_chunks.back().reserve(std::max(kChunk, s.size()));
    }
    std::string& chunk = m_chunks.back();
    size_t at = chunk.size();
    chunk.append(s);
    std::string_view stored(chunk.data() + at, s.size());
    auto id = static_cast<StrId>(m_views.size());
    m_views.push_back(stored);
    m_index.emplace(stored, id);
    return id;
}

std::optional<StrId> StringTable::find(std::string_view s) const
{
    if (auto it = m_index.find(s); it != m_index.end())
        return it->second;
    return std::nullopt;
}

size_t StringTable::bytes() const
{
    size_t b = m_views.capacity() * sizeof(std::string_view) + m_index.size() * (sizeof(void*) * 2 + 24);
    for (const auto& c : m_chunks)
        b += c.capacity();
    return b;
}

const char* toString(EventKind k)
{
    switch (k) {
    case EventKind::Kernel:
        return "kernel";
    case EventKind::Memcpy:
        return "memcpy";
    case EventKind::Memset:
        return "memset";
    case EventKind::RuntimeApi:
        return "cuda_runtime";
    case EventKind::DriverApi:
        return "cuda_driver";
    case EventKind::NvtxRange:
        return "nvtx_range";
    case EventKind::NvtxMark:
        return "nvtx_mark";
    case EventKind::GpuAnnotation:
        return "gpu_annotation";
    case EventKind::CpuOp:
        return "cpu_op";
    case EventKind::Sync:
        return "sync";
    case EventKind::Other:
        return "other";
    }
    return "other";
}

bool isGpuWork(EventKind k)
{
    return k == EventKind::Kernel || k == EventKind::Memcpy || k == EventKind::Memset;
}

static uint64_t rowKey(RowKind kind, int64_t a, int64_t b)
{
    // A hash key, not an identity: collisions are resolved by checking the row fields.
    uint64_t h = static_cast<uint64_t>(a) * 0x9E3779B97F4A7C15ull;
    h ^= static_cast<uint64_t>(b) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    return h * 2 + (kind == RowKind::GpuStream ? 1 : 0);
}

uint32_t Trace::cpuRow(int64_t pid, int64_t tid)
{
    uint64_t key = rowKey(RowKind::CpuThread, pid, tid);
    for (;; ++key) {
        auto it = m_rowIndex.find(key);
        if (it == m_rowIndex.end())
            break;
        const Row& r = m_rows[it->second];
        if (r.kind == RowKind::CpuThread && r.pid == pid && r.tid == tid)
            return it->second;
    }
    Row r;
    r.kind = RowKind::CpuThread;
    r.pid = pid;
    r.tid = tid;
    r.name = m_strings.intern("pid " + std::to_string(pid) + " thread " + std::to_string(tid));
    m_rows.push_back(std::move(r));
    auto idx = static_cast<uint32_t>(m_rows.size() - 1);
    m_rowIndex.emplace(key, idx);
    return idx;
}

uint32_t Trace::gpuRow(int32_t device, int64_t stream)
{
    uint64_t key = rowKey(RowKind::GpuStream, device, stream);
    for (;; ++key) {
        auto it = m_rowIndex.find(key);
        if (it == m_rowIndex.end())
            break;
        const Row& r = m_rows[it->second];
        if (r.kind == RowKind::GpuStream && r.device == device && r.tid == stream)
            return it->second;
    }
    Row r;
    r.kind = RowKind::GpuStream;
    r.pid = -1;
    r.tid = stream;
    r.device = device;
    r.name = m_strings.intern("GPU " + std::to_string(device) + " stream " + std::to_string(stream));
    m_rows.push_back(std::move(r));
    auto idx = static_cast<uint32_t>(m_rows.size() - 1);
    m_rowIndex.emplace(key, idx);
    return idx;
}

void Trace::setRowName(uint32_t row, std::string_view name)
{
    if (row < m_rows.size())
        m_rows[row].name = m_strings.intern(name);
}

uint32_t Trace::addEvent(Event e, uint32_t correlation)
{
    if (e.end < e.start)
        e.end = e.start;
    if (!isGpuWork(e.kind))
        e.aux = correlation;
    m_events.push_back(e);
    return static_cast<uint32_t>(m_events.size() - 1);
}

uint32_t Trace::addKernel(Event e, const KernelInfo& k)
{
    e.kind = EventKind::Kernel;
    e.aux = static_cast<uint32_t>(m_kernels.size());
    m_kernels.push_back(k);
    return addEvent(e);
}

uint32_t Trace::addMemOp(Event e, const MemOpInfo& m)
{
    if (e.kind != EventKind::Memset)
        e.kind = EventKind::Memcpy;
    e.aux = static_cast<uint32_t>(m_memOps.size());
    m_memOps.push_back(m);
    return addEvent(e);
}

void Trace::addDevice(Device d)
{
    for (auto& existing : m_devices)
        if (existing.id == d.id) {
            existing = std::move(d);
            return;
        }
    m_devices.push_back(std::move(d));
}

void Trace::setProcessName(int64_t pid, std::string_view name)
{
    for (auto& p : m_processes)
        if (p.pid == pid) {
            p.name = std::string(name);
            return;
        }
    m_processes.push_back({ pid, std::string(name) });
}

void Trace::addLink(uint32_t launchEvent, uint32_t gpuEvent)
{
    m_links.push_back({ launchEvent, gpuEvent });
}

const KernelInfo* Trace::kernelInfo(const Event& e) const
{
    return e.kind == EventKind::Kernel && e.aux < m_kernels.size() ? &m_kernels[e.aux] : nullptr;
}

const MemOpInfo* Trace::memOpInfo(const Event& e) const
{
    return (e.kind == EventKind::Memcpy || e.kind == EventKind::Memset) && e.aux < m_memOps.size() ? &m_memOps[e.aux]
                                                                                                   : nullptr;
}

uint32_t Trace::correlation(const Event& e) const
{
    if (const KernelInfo* k = kernelInfo(e))
        return k->correlation;
    if (const MemOpInfo* m = memOpInfo(e))
        return m->correlation;
    return isGpuWork(e.kind) ? 0 : e.aux;
}

void Trace::dropOutliers()
{
    // Clusters of events separated by more than an hour of nothing; the one with most events is the trace.
    // Clusters far from it with under a tenth of its events are clock glitches (ts = -1e12 us, 0 in a trace on
    // the epoch clock): kept, they would stretch every span to days.
    constexpr int64_t kClusterGapNs = 3'600'000'000'000;
    if (m_events.size() < 2)
        return;
    std::vector<uint32_t> order(m_events.size());
    for (uint32_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::sort(order.begin(), order.end(), [this](uint32_t a, uint32_t b) {
        return m_events[a].start != m_events[b].start ? m_events[a].start < m_events[b].start : a < b;
    });
    struct Cluster {
        size_t first, last; // positions in order, inclusive
        int64_t start, end;
    };
    std::vector<Cluster> clusters { { 0, 0, m_events[order[0]].start, m_events[order[0]].end } };
    for (size_t k = 1; k < order.size(); ++k) {
        const Event& e = m_events[order[k]];
        Cluster& c = clusters.back();
        if (e.start - c.end > kClusterGapNs) {
            clusters.push_back({ k, k, e.start, e.end });
        } else {
            c.last = k;
            c.end = std::max(c.end, e.end);
        }
    }
    if (clusters.size() == 1)
        return;
    const auto bulk = std::max_element(clusters.begin(), clusters.end(),
        [](const Cluster& a, const Cluster& b) { return a.last - a.first < b.last - b.first; });
    std::vector<uint8_t> drop(m_events.size(), 0);
    size_t dropped = 0;
    std::string example;
    for (const auto& c : clusters) {
        const size_t n = c.last - c.first + 1;
        if (&c == &*bulk || n * 10 >= bulk->last - bulk->first + 1)
            continue; // a second burst of real size is real
        for (size_t k = c.first; k <= c.last; ++k)
            drop[order[k]] = 1;
        if (example.empty()) {
            const Event& e = m_events[order[c.first]];
            char buf[160];
            std::snprintf(buf, sizeof buf, " at %.6g s, %.3g s from the rest", static_cast<double>(e.start) / 1e9,
                static_cast<double>(e.start < bulk->start ? bulk->start - e.end : e.start - bulk->end) / 1e9);
            example = "'" + std::string(m_strings.view(e.name)).substr(0, 80) + "'" + buf;
        }
        dropped += n;
    }
    if (!dropped)
        return;
    std::vector<uint32_t> newIndex(m_events.size(), kNone);
    std::vector<Event> kept;
    kept.reserve(m_events.size() - dropped);
    for (uint32_t i = 0; i < m_events.size(); ++i)
        if (!drop[i]) {
            newIndex[i] = static_cast<uint32_t>(kept.size());
            kept.push_back(m_events[i]);
        }
    m_events = std::move(kept);
    std::erase_if(m_links, [&](const Link& l) {
        return l.launch >= newIndex.size() || l.gpu >= newIndex.size() || newIndex[l.launch] == kNone
            || newIndex[l.gpu] == kNone;
    });
    for (auto& l : m_links) {
        l.launch = newIndex[l.launch];
        l.gpu = newIndex[l.gpu];
    }
    for (auto& s : m_sol)
        if (s.event != kNone)
            s.event = s.event < newIndex.size() ? newIndex[s.event] : kNone;
    std::unordered_map<uint32_t, OpInputs> inputs;
    for (auto& [event, in] : m_opInputs)
        if (event < newIndex.size() && newIndex[event] != kNone)
            inputs.emplace(newIndex[event], std::move(in));
    m_opInputs = std::move(inputs);
    m_meta.warnings.push_back(std::to_string(dropped) + (dropped == 1 ? " event lies" : " events lie")
        + " more than an hour away from the rest of the trace (" + example
        + "): a clock glitch; left out of the timeline, spans and busy time");
}

const OpInputs* Trace::opInputs(uint32_t event) const
{
    auto it = m_opInputs.find(event);
    return it == m_opInputs.end() ? nullptr : &it->second;
}

int64_t Trace::busyNs(uint32_t row) const
{
    const Row& r = m_rows[row];
    if (r.kind == RowKind::CpuThread) {
        int64_t busy = 0;
        if (!r.lanes.empty())
            for (uint32_t i : r.lanes.front())
                busy += m_events[i].duration();
        return busy;
    }
    // Union of the stream's kernels, copies and memsets. Lanes are in start order, but work of different lanes
    // overlaps, and annotation ranges projected onto the stream are not work.
    std::vector<std::pair<int64_t, int64_t>> work;
    for (const auto& lane : r.lanes)
        for (uint32_t i : lane)
            if (isGpuWork(m_events[i].kind))
                work.emplace_back(m_events[i].start, m_events[i].end);
    std::sort(work.begin(), work.end());
    int64_t busy = 0, curA = 0, curB = std::numeric_limits<int64_t>::min();
    for (const auto& [a, b] : work) {
        if (a > curB) {
            if (curB != std::numeric_limits<int64_t>::min())
                busy += curB - curA;
            curA = a;
            curB = b;
        } else {
            curB = std::max(curB, b);
        }
    }
    if (curB != std::numeric_limits<int64_t>::min())
        busy += curB - curA;
    return busy;
}

void Trace::finalize()
{
    if (m_finalized)
        return;
    m_finalized = true;
    dropOutliers();
    if (!m_events.empty()) {
        int64_t lo = std::numeric_limits<int64_t>::max();
        int64_t hi = std::numeric_limits<int64_t>::min();
        for (const auto& e : m_events) {
            lo = std::min(lo, e.start);
            hi = std::max(hi, e.end);
        }
        m_offset = lo;
        for (auto& e : m_events) {
            e.start -= lo;
            e.end -= lo;
        }
        m_start = 0;
        m_end = hi - lo;
    }

    // Lanes: greedy first-free-lane layout in (start asc, end desc) order puts a properly nested child one
    // lane below its parent and guarantees that no two events of a lane overlap.
    std::vector<std::vector<uint32_t>> byRow(m_rows.size());
    for (uint32_t i = 0; i < m_events.size(); ++i)
        if (m_events[i].row < m_rows.size())
            byRow[m_events[i].row].push_back(i);
    constexpr size_t kMaxLanes = 256;
    size_t overflowed = 0;
    for (size_t r = 0; r < m_rows.size(); ++r) {
        auto& idx = byRow[r];
        std::sort(idx.begin(), idx.end(), [this](uint32_t a, uint32_t b) {
            const Event& ea = m_events[a];
            const Event& eb = m_events[b];
            if (ea.start != eb.start)
                return ea.start < eb.start;
            if (ea.end != eb.end)
                return ea.end > eb.end;
            return a < b;
        });
        std::vector<int64_t> laneEnd;
        auto& lanes = m_rows[r].lanes;
        lanes.clear();
        for (uint32_t i : idx) {
            Event& e = m_events[i];
            size_t lane = 0;
            while (lane < laneEnd.size() && laneEnd[lane] > e.start)
                ++lane;
            if (lane >= kMaxLanes) {
                // Pathological overlap: keep the event in the last lane (queries may then miss it) rather than
                // growing without bound.
                lane = kMaxLanes - 1;
                ++overflowed;
            }
            if (lane == laneEnd.size()) {
                laneEnd.push_back(e.end);
                lanes.emplace_back();
            } else {
                laneEnd[lane] = std::max(laneEnd[lane], e.end);
            }
            e.lane = static_cast<uint8_t>(lane);
            lanes[lane].push_back(i);
        }
        for (auto& l : lanes)
            l.shrink_to_fit();
    }
    if (overflowed)
        m_meta.warnings.push_back(std::to_string(overflowed) + " events overlap more than 256 deep on one row");

    // Correlation links: the runtime/driver API call and the GPU work it launched share a correlation id.
    std::unordered_map<uint32_t, uint32_t> launchByCorr;
    launchByCorr.reserve(m_events.size() / 4 + 16);
    for (uint32_t i = 0; i < m_events.size(); ++i) {
        const Event& e = m_events[i];
        if ((e.kind == EventKind::RuntimeApi || e.kind == EventKind::DriverApi) && e.aux != 0) {
            // Prefer the runtime call when both runtime and driver records carry the same id.
            auto [it, inserted] = launchByCorr.emplace(e.aux, i);
            if (!inserted && m_events[it->second].kind == EventKind::DriverApi && e.kind == EventKind::RuntimeApi)
                it->second = i;
        }
    }
    std::vector<uint8_t> hasLink(m_events.size(), 0);
    for (const auto& l : m_links)
        if (l.gpu < hasLink.size())
            hasLink[l.gpu] = 1;
    for (uint32_t i = 0; i < m_events.size(); ++i) {
        const Event& e = m_events[i];
        if (!isGpuWork(e.kind) || hasLink[i])
            continue;
        uint32_t corr = correlation(e);
        if (corr == 0)
            continue;
        if (auto it = launchByCorr.find(corr); it != launchByCorr.end())
            m_links.push_back({ it->second, i });
    }
    std::erase_if(m_links, [this](const Link& l) { return l.launch >= m_events.size() || l.gpu >= m_events.size(); });
    std::sort(m_links.begin(), m_links.end(), [](const Link& a, const Link& b) { return a.gpu < b.gpu; });
    m_links.erase(
        std::unique(m_links.begin(), m_links.end(), [](const Link& a, const Link& b) { return a.gpu == b.gpu; }),
        m_links.end());
    m_linksByLaunch = m_links;
    std::sort(m_linksByLaunch.begin(), m_linksByLaunch.end(),
        [](const Link& a, const Link& b) { return a.launch != b.launch ? a.launch < b.launch : a.gpu < b.gpu; });
}

static size_t firstEndingAtOrAfter(const std::vector<Event>& ev, const std::vector<uint32_t>& lane, int64_t t0)
{
    auto it = std::partition_point(lane.begin(), lane.end(), [&](uint32_t i) { return ev[i].end < t0; });
    return static_cast<size_t>(it - lane.begin());
}

static size_t firstStartingAfter(
    const std::vector<Event>& ev, const std::vector<uint32_t>& lane, size_t from, size_t to, int64_t t)
{
    auto it = std::partition_point(lane.begin() + static_cast<ptrdiff_t>(from),
        lane.begin() + static_cast<ptrdiff_t>(to), [&](uint32_t i) { return ev[i].start <= t; });
    return static_cast<size_t>(it - lane.begin());
}

std::vector<uint32_t> Trace::eventsInWindow(uint32_t row, uint32_t lane, int64_t t0, int64_t t1) const
{
    std::vector<uint32_t> out;
    if (row >= m_rows.size() || lane >= m_rows[row].lanes.size() || t1 < t0)
        return out;
    const auto& l = m_rows[row].lanes[lane];
    size_t a = firstEndingAtOrAfter(m_events, l, t0);
    size_t b = firstStartingAfter(m_events, l, a, l.size(), t1);
    out.assign(l.begin() + static_cast<ptrdiff_t>(a), l.begin() + static_cast<ptrdiff_t>(b));
    return out;
}

std::vector<uint32_t> Trace::eventsInWindow(uint32_t row, int64_t t0, int64_t t1) const
{
    std::vector<uint32_t> out;
    if (row >= m_rows.size())
        return out;
    for (uint32_t lane = 0; lane < m_rows[row].lanes.size(); ++lane) {
        auto part = eventsInWindow(row, lane, t0, t1);
        out.insert(out.end(), part.begin(), part.end());
    }
    return out;
}

std::vector<DrawItem> Trace::drawItems(uint32_t row, uint32_t lane, int64_t t0, int64_t t1, int64_t minWidthNs) const
{
    std::vector<DrawItem> out;
    if (row >= m_rows.size() || lane >= m_rows[row].lanes.size() || t1 < t0)
        return out;
    minWidthNs = std::max<int64_t>(minWidthNs, 1);
    const auto& l = m_rows[row].lanes[lane];
    size_t i = firstEndingAtOrAfter(m_events, l, t0);
    size_t last = firstStartingAfter(m_events, l, i, l.size(), t1);
    while (i < last) {
        const Event& e = m_events[l[i]];
        if (e.duration() >= minWidthNs) {
            out.push_back({ e.start, e.end, l[i], 1 });
            ++i;
            continue;
        }
        DrawItem item { e.start, e.end, l[i], 1 };
        size_t first = i++;
        // Jump over every event that starts within one resolution step of the merged block's end; lanes are
        // non-overlapping, so ends are sorted too and the block's new end is the end of the last one jumped.
        while (i < last) {
            size_t j = firstStartingAfter(m_events, l, i, last, item.end + minWidthNs - 1);
            if (j == i)
                break;
            item.end = std::max(item.end, m_events[l[j - 1]].end);
            i = j;
        }
        item.count = static_cast<uint32_t>(i - first);
        out.push_back(item);
    }
    return out;
}

uint32_t Trace::launchOf(uint32_t gpuEvent) const
{
    auto it = std::lower_bound(
        m_links.begin(), m_links.end(), gpuEvent, [](const Link& l, uint32_t g) { return l.gpu < g; });
    return it != m_links.end() && it->gpu == gpuEvent ? it->launch : kNone;
}

std::vector<uint32_t> Trace::gpuWorkOf(uint32_t launchEvent) const
{
    std::vector<uint32_t> out;
    auto it = std::lower_bound(m_linksByLaunch.begin(), m_linksByLaunch.end(), launchEvent,
        [](const Link& l, uint32_t a) { return l.launch < a; });
    for (; it != m_linksByLaunch.end() && it->launch == launchEvent; ++it)
        out.push_back(it->gpu);
    return out;
}

size_t Trace::memoryBytes() const
{
    size_t b = m_events.capacity() * sizeof(Event) + m_kernels.capacity() * sizeof(KernelInfo)
        + m_memOps.capacity() * sizeof(MemOpInfo) + m_strings.bytes()
        + (m_links.capacity() + m_linksByLaunch.capacity()) * sizeof(Link);
    for (const auto& r : m_rows)
        for (const auto& l : r.lanes)
            b += l.capacity() * sizeof(uint32_t);
    return b;
}

} // namespace kl::prof
