#include "profiler/analysis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <unordered_map>

namespace kl::prof {

Ceilings Ceilings::h200()
{
    Ceilings c;
    c.device = "NVIDIA H200 (measured: copy 4.27 TB/s, FP32 FMA 56 TFLOP/s, bf16 GEMM 790 TFLOP/s)";
    c.dramBytesPerSec = 4.27e12;
    c.fp32FlopsPerSec = 56e12;
    c.tensorFlopsPerSec = 790e12;
    c.graphNodeNs = 500;
    return c;
}

Ceilings Ceilings::forDeviceName(const std::string& name)
{
    // Only devices we measured ourselves; others get no ceilings rather than borrowed ones.
    if (name.find("H200") != std::string::npos)
        return h200();
    return {};
}

std::string formatNs(double ns)
{
    char buf[64];
    double a = std::fabs(ns);
    if (a < 1e3)
        std::snprintf(buf, sizeof buf, "%.0f ns", ns);
    else if (a < 1e6)
        std::snprintf(buf, sizeof buf, "%.2f us", ns / 1e3);
    else if (a < 1e9)
        std::snprintf(buf, sizeof buf, "%.2f ms", ns / 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.3f s", ns / 1e9);
    return buf;
}

namespace {

    double median(std::vector<int64_t>& v)
    {
        if (v.empty())
            return -1;
        size_t m = v.size() / 2;
        std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(m), v.end());
        double hi = static_cast<double>(v[m]);
        if (v.size() % 2)
            return hi;
        double lo = static_cast<double>(*std::max_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(m)));
        return (lo + hi) / 2;
    }

    std::string pct(double f)
    {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f%%", f * 100);
        return buf;
    }

    bool isSyncCall(std::string_view n)
    {
        if (n.find("ynchronize") != std::string_view::npos)
            return true;
        // Synchronous copies block the host until the GPU is done.
        bool copy = n.rfind("cudaMemcpy", 0) == 0 || n.rfind("cuMemcpy", 0) == 0;
        return copy && n.find("Async") == std::string_view::npos;
    }

    bool isLaunchCall(std::string_view n)
    {
        return n.find("Launch") != std::string_view::npos || n.find("Async") != std::string_view::npos
            || n.rfind("cudaMemset", 0) == 0 || n.rfind("cuMemset", 0) == 0;
    }

    struct Interval {
        int64_t a, b;
        uint32_t event;
    };

    // The innermost NVTX / annotation range on `row` that contains time t.
    std::string_view innermostRange(const Trace& t, uint32_t row, int64_t at)
    {
        std::string_view best;
        int bestLane = -1;
        const Row& r = t.rows()[row];
        for (uint32_t lane = 0; lane < r.lanes.size(); ++lane)
            for (uint32_t i : t.eventsInWindow(row, lane, at, at)) {
                const Event& e = t.event(i);
                if (e.kind == EventKind::NvtxRange && static_cast<int>(lane) > bestLane) {
                    best = t.name(e);
                    bestLane = static_cast<int>(lane);
                }
            }
        return best;
    }

    // Ranges that differ only in a trailing counter ("ProfilerStep#12", "step 3") are one group.
    std::string rangeGroup(std::string_view name)
    {
        size_t end = name.size();
        while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9')
            --end;
        if (end < name.size() && end > 0 && (name[end - 1] == '#' || name[end - 1] == ' ' || name[end - 1] == '_'))
            return std::string(name.substr(0, end)) + "*";
        return std::string(name);
    }

    Ceilings ceilingsOf(const Trace& t, const AnalysisOptions& opts)
    {
        Ceilings c = opts.ceilings;
        if (c.device.empty())
            for (const auto& d : t.devices())
                if (c = Ceilings::forDeviceName(d.name); !c.device.empty())
                    break;
        return c;
    }

    bool hasRanges(const Trace& t)
    {
        for (uint32_t i = 0; i < t.eventCount(); ++i)
            if (t.event(i).kind == EventKind::NvtxRange)
                return true;
        return false;
    }

    // Mean SOL counters of the kernels of one name.
    struct SolMeans {
        double dram = 0, sm = 0, occ = 0;
        int n = 0, nOcc = 0;
    };

    std::unordered_map<std::string, SolMeans> solByKernelName(const Trace& t)
    {
        std::unordered_map<std::string, SolMeans> byName;
        for (const auto& s : t.sol()) {
            std::string name = s.event < t.eventCount() ? std::string(t.name(t.event(s.event))) : s.name;
            // Counters of very short kernels are noise (L2 hit rates above 100% on a 2 us kernel).
            if (s.durationNs >= 0 && s.durationNs < 2000)
                continue;
            if (s.dramThroughputPct < 0 || s.smThroughputPct < 0)
                continue;
            SolMeans& m = byName[name];
            m.dram += s.dramThroughputPct;
            m.sm += s.smThroughputPct;
            ++m.n;
            if (s.achievedOccupancyPct >= 0) {
                m.occ += s.achievedOccupancyPct;
                ++m.nOcc;
            }
        }
        return byName;
    }

    // Roofline class: counters first (what the hardware saw), else analytic work against measured ceilings.
    void classifyRoofline(KernelStat& s, const std::unordered_map<std::string, SolMeans>& sol,
        const std::vector<KernelWork>& work, const Ceilings& ceilings)
    {
        Roofline& r = s.roofline;
        if (auto it = sol.find(s.name); it != sol.end() && it->second.n > 0) {
            r.basis = "sol-counters";
            r.dramPct = it->second.dram / it->second.n;
            r.computePct = it->second.sm / it->second.n;
            if (it->second.nOcc)
                s.achievedOccupancyPct = it->second.occ / it->second.nOcc;
        } else {
            for (const auto& w : work) {
                if (w.nameContains.empty() || s.name.find(w.nameContains) == std::string::npos)
                    continue;
                double sec = s.medianNs * 1e-9;
                double peak = w.tensorCores ? ceilings.tensorFlopsPerSec : ceilings.fp32FlopsPerSec;
                if (sec <= 0 || ceilings.dramBytesPerSec <= 0)
                    break;
                r.basis = "known-work";
                r.dramPct = w.bytes / sec / ceilings.dramBytesPerSec * 100;
                r.computePct = peak > 0 ? w.flops / sec / peak * 100 : -1;
                r.arithmeticIntensity = w.bytes > 0 ? w.flops / w.bytes : -1;
                break;
            }
        }
        if (!r.basis.empty())
            r.bound = rooflineClass(r.dramPct, r.computePct);
    }

    // Sets the kernel totals and the top kernels by total time, each with its roofline class.
    void addKernelStats(Analysis& a, const Trace& t, const AnalysisOptions& opts)
    {
        struct Times {
            std::vector<int64_t> durs;
            int64_t total = 0;
            uint32_t first = kNone;
            double occSum = 0;
            uint64_t occN = 0;
        };
        std::unordered_map<StrId, Times> byName;
        for (uint32_t i = 0; i < t.eventCount(); ++i) {
            const Event& e = t.event(i);
            if (e.kind != EventKind::Kernel)
                continue;
            Times& acc = byName[e.name];
            acc.durs.push_back(e.duration());
            acc.total += e.duration();
            if (acc.first == kNone)
                acc.first = i;
            if (const KernelInfo* k = t.kernelInfo(e); k && k->estOccupancyPct >= 0) {
                acc.occSum += k->estOccupancyPct;
                ++acc.occN;
            }
            ++a.kernelCount;
            a.kernelNs += e.duration();
        }
        a.kernelNames = byName.size();

        std::vector<KernelStat> stats;
        stats.reserve(byName.size());
        for (auto& [name, acc] : byName) {
            KernelStat s;
            s.name = std::string(t.strings().view(name));
            s.count = acc.durs.size();
            s.totalNs = acc.total;
            s.meanNs = static_cast<double>(acc.total) / static_cast<double>(s.count);
            s.minNs = *std::min_element(acc.durs.begin(), acc.durs.end());
            s.maxNs = *std::max_element(acc.durs.begin(), acc.durs.end());
            s.medianNs = median(acc.durs);
            s.share = a.kernelNs > 0 ? static_cast<double>(acc.total) / static_cast<double>(a.kernelNs) : 0;
            if (const KernelInfo* k = t.kernelInfo(t.event(acc.first))) {
                std::copy(k->grid, k->grid + 3, s.grid);
                std::copy(k->block, k->block + 3, s.block);
                s.registersPerThread = k->registersPerThread;
                s.sharedMemory = k->staticSharedMemory + k->dynamicSharedMemory;
            }
            if (acc.occN)
                s.estOccupancyPct = acc.occSum / static_cast<double>(acc.occN);
            stats.push_back(std::move(s));
        }
        std::sort(stats.begin(), stats.end(), [](const KernelStat& x, const KernelStat& y) {
            return x.totalNs != y.totalNs ? x.totalNs > y.totalNs : x.name < y.name;
        });
        if (stats.size() > opts.topKernels)
            stats.resize(opts.topKernels);
        const auto sol = solByKernelName(t);
        for (auto& s : stats)
            classifyRoofline(s, sol, opts.work, a.ceilings);
        a.kernels = std::move(stats);
    }

    // GPU work (kernels, copies, memsets) per device, and the busy time per (device, stream).
    struct GpuWork {
        std::map<int32_t, std::vector<Interval>> byDevice;
        std::map<std::pair<int32_t, int64_t>, std::pair<int64_t, uint64_t>> streamBusy; // -> (busy, items)
    };

    GpuWork gpuWorkOf(const Trace& t)
    {
        GpuWork w;
        for (uint32_t ri = 0; ri < t.rows().size(); ++ri) {
            const Row& row = t.rows()[ri];
            if (row.kind != RowKind::GpuStream)
                continue;
            std::vector<Interval> rowWork;
            for (const auto& lane : row.lanes)
                for (uint32_t i : lane)
                    if (isGpuWork(t.event(i).kind))
                        rowWork.push_back({ t.event(i).start, t.event(i).end, i });
            if (rowWork.empty())
                continue;
            auto& sb = w.streamBusy[{ row.device, row.tid }];
            sb.first += t.busyNs(ri);
            sb.second += rowWork.size();
            auto& dw = w.byDevice[row.device];
            dw.insert(dw.end(), rowWork.begin(), rowWork.end());
        }
        for (auto& [dev, items] : w.byDevice)
            std::sort(items.begin(), items.end(),
                [](const Interval& x, const Interval& y) { return x.a != y.a ? x.a < y.a : x.b > y.b; });
        return w;
    }

    // Splits a gap in a device's work by what the launching thread did meanwhile (its CUDA API calls), and
    // tallies the host part by the CPU op it was spent in.
    class IdleAttribution {
    public:
        explicit IdleAttribution(const Trace& t)
            : t_(t)
        {
        }

        void classifyGap(int64_t g0, int64_t g1, uint32_t nextEvent, IdleBreakdown& idle)
        {
            uint32_t launch = t_.launchOf(nextEvent);
            int64_t gap = g1 - g0;
            if (launch == kNone) {
                idle.unattributedNs += gap;
                return;
            }
            const Event& L = t_.event(launch);
            // After the launch call returned, the work sat in the queue (driver/GPU launch latency, dependencies).
            int64_t hostEnd = std::clamp(L.end, g0, g1);
            idle.queuedNs += g1 - hostEnd;
            if (hostEnd == g0)
                return;
            // Before that, walk the launching thread's CUDA API calls; time not inside a call is host work.
            std::vector<uint32_t> calls = t_.eventsInWindow(L.row, g0, hostEnd);
            std::erase_if(calls, [&](uint32_t i) {
                EventKind k = t_.event(i).kind;
                return k != EventKind::RuntimeApi && k != EventKind::DriverApi;
            });
            std::sort(calls.begin(), calls.end(),
                [&](uint32_t x, uint32_t y) { return t_.event(x).start < t_.event(y).start; });
            int64_t covered = g0, syncNs = 0, launchNs = 0;
            for (uint32_t i : calls) {
                const Event& c = t_.event(i);
                int64_t a0 = std::max(c.start, covered), a1 = std::min(c.end, hostEnd);
                if (a1 <= a0)
                    continue;
                std::string_view n = t_.name(c);
                if (isSyncCall(n))
                    syncNs += a1 - a0;
                else if (i == launch || isLaunchCall(n))
                    launchNs += a1 - a0;
                else
                    continue; // other CUDA calls (malloc, event record ...) count as host time
                covered = a1;
            }
            idle.syncNs += syncNs;
            idle.launchNs += launchNs;
            idle.hostNs += (hostEnd - g0) - syncNs - launchNs;
            attributeHost(L.row, g0, hostEnd, (hostEnd - g0) - syncNs - launchNs);
        }

        // The CPU ops with the most host-attributed idle, largest first.
        std::vector<std::pair<std::string, int64_t>> topHostOps(size_t n) const
        {
            std::vector<std::pair<std::string, int64_t>> ops;
            for (const auto& [name, ns] : hostByOp_)
                ops.emplace_back(std::string(t_.strings().view(name)), ns);
            std::sort(ops.begin(), ops.end(), [](const auto& x, const auto& y) {
                return x.second != y.second ? x.second > y.second : x.first < y.first;
            });
            if (ops.size() > n)
                ops.resize(n);
            return ops;
        }

    private:
        // The innermost CPU op or range running on `row` in the middle of [h0, h1] gets the time.
        void attributeHost(uint32_t row, int64_t h0, int64_t h1, int64_t ns)
        {
            if (ns <= 0)
                return;
            int64_t mid = h0 + (h1 - h0) / 2;
            StrId best = 0;
            int bestLane = -1;
            const Row& r = t_.rows()[row];
            for (uint32_t lane = 0; lane < r.lanes.size(); ++lane)
                for (uint32_t i : t_.eventsInWindow(row, lane, mid, mid)) {
                    EventKind k = t_.event(i).kind;
                    if ((k == EventKind::CpuOp || k == EventKind::NvtxRange) && static_cast<int>(lane) > bestLane) {
                        best = t_.event(i).name;
                        bestLane = static_cast<int>(lane);
                    }
                }
            if (bestLane >= 0)
                hostByOp_[best] += ns;
        }

        const Trace& t_;
        std::unordered_map<StrId, int64_t> hostByOp_;
    };

    // Busy time, gaps (with their causes), launch latencies and per-stream busy time of one device's work
    // (sorted by start).
    DeviceBusy deviceBusy(const Trace& t, int32_t dev, const std::vector<Interval>& items, const GpuWork& work,
        IdleAttribution& idleCauses)
    {
        DeviceBusy db;
        db.device = dev;
        for (const auto& d : t.devices())
            if (d.id == dev)
                db.name = d.name;
        int64_t lo = items.front().a, hi = items.front().b;
        int64_t curA = items.front().a, curB = items.front().b;
        std::vector<int64_t> apiDur, latency;
        for (size_t k = 0; k < items.size(); ++k) {
            const Interval& it = items[k];
            hi = std::max(hi, it.b);
            if (k > 0) {
                if (it.a > curB) {
                    db.busyNs += curB - curA;
                    ++db.gaps;
                    idleCauses.classifyGap(curB, it.a, it.event, db.idle);
                    curA = it.a;
                    curB = it.b;
                } else {
                    curB = std::max(curB, it.b);
                }
            }
            uint32_t L = t.launchOf(it.event);
            if (L != kNone) {
                ++db.launches;
                apiDur.push_back(t.event(L).duration());
                latency.push_back(it.a - t.event(L).end);
            }
        }
        db.busyNs += curB - curA;
        db.windowNs = hi - lo;
        db.busyPct = db.windowNs > 0 ? 100.0 * static_cast<double>(db.busyNs) / static_cast<double>(db.windowNs) : 0;
        db.medianLaunchApiNs = median(apiDur);
        db.medianLaunchLatencyNs = median(latency);
        for (const auto& [key, v] : work.streamBusy)
            if (key.first == dev)
                db.streams.push_back({ key.second, v.first,
                    db.windowNs > 0 ? 100.0 * static_cast<double>(v.first) / static_cast<double>(db.windowNs) : 0,
                    v.second });
        std::sort(db.streams.begin(), db.streams.end(),
            [](const StreamBusy& x, const StreamBusy& y) { return x.busyNs > y.busyNs; });
        return db;
    }

    // The phase over items[k..j] if it idles enough to be launch-bound, with what CUDA graphs would save.
    std::optional<LaunchPhase> launchBoundPhase(const Trace& t, int32_t dev, const std::vector<Interval>& items,
        size_t k, size_t j, int64_t end, const AnalysisOptions& opts, double graphNodeNs, bool labelled)
    {
        LaunchPhase p;
        p.device = dev;
        p.startNs = items[k].a;
        p.endNs = end;
        p.kernels = j - k + 1;
        std::vector<int64_t> durs, gaps, apis;
        int64_t cb = items[k].b, ca = items[k].a;
        for (size_t q = k; q <= j; ++q) {
            durs.push_back(items[q].b - items[q].a);
            if (q > k) {
                gaps.push_back(std::max<int64_t>(0, items[q].a - cb));
                if (items[q].a > cb) {
                    p.busyNs += cb - ca;
                    ca = items[q].a;
                }
                cb = std::max(cb, items[q].b);
            }
            uint32_t L = t.launchOf(items[q].event);
            if (L != kNone)
                apis.push_back(t.event(L).duration());
        }
        p.busyNs += cb - ca;
        int64_t span = p.endNs - p.startNs;
        double idleFrac = span > 0 ? 1.0 - static_cast<double>(p.busyNs) / static_cast<double>(span) : 0;
        if (idleFrac < opts.minPhaseIdleFraction)
            return std::nullopt;
        p.medianKernelNs = median(durs);
        p.medianGapNs = median(gaps);
        p.medianLaunchApiNs = median(apis);
        p.estimatedWithGraphsNs
            = p.busyNs + static_cast<int64_t>(static_cast<double>(p.kernels) * (graphNodeNs > 0 ? graphNodeNs : 500));
        p.estimatedWithGraphsNs = std::min(p.estimatedWithGraphsNs, span);
        p.estimatedSpeedup = p.estimatedWithGraphsNs > 0
            ? static_cast<double>(span) / static_cast<double>(p.estimatedWithGraphsNs)
            : 1;
        uint32_t L = t.launchOf(items[k].event);
        if (L != kNone && labelled)
            p.label = std::string(innermostRange(t, t.event(L).row, t.event(L).start));
        return p;
    }

    // Launch-overhead phases of one device: maximal runs of short GPU work with small breaks between them.
    std::vector<LaunchPhase> launchPhasesOf(const Trace& t, int32_t dev, const std::vector<Interval>& items,
        const AnalysisOptions& opts, double graphNodeNs, bool labelled)
    {
        std::vector<LaunchPhase> phases;
        size_t k = 0;
        while (k < items.size()) {
            size_t j = k;
            int64_t end = items[k].b;
            while (j + 1 < items.size() && items[j + 1].b - items[j + 1].a < opts.shortKernelNs
                && items[j].b - items[j].a < opts.shortKernelNs && items[j + 1].a - end < opts.phaseBreakGapNs) {
                ++j;
                end = std::max(end, items[j].b);
            }
            if (j - k + 1 >= opts.minPhaseKernels)
                if (auto p = launchBoundPhase(t, dev, items, k, j, end, opts, graphNodeNs, labelled))
                    phases.push_back(std::move(*p));
            k = j + 1;
        }
        return phases;
    }

    // Per NVTX / annotation range group: kernels launched inside (each group counted once per kernel).
    std::vector<RangeStat> rangeStats(const Trace& t, int64_t kernelNs, size_t top)
    {
        std::unordered_map<StrId, std::string> groupOf;
        auto group = [&](StrId id) -> const std::string& {
            auto it = groupOf.find(id);
            if (it == groupOf.end())
                it = groupOf.emplace(id, rangeGroup(t.strings().view(id))).first;
            return it->second;
        };
        std::unordered_map<std::string, RangeStat> rs;
        for (uint32_t i = 0; i < t.eventCount(); ++i) {
            const Event& e = t.event(i);
            if (e.kind == EventKind::NvtxRange) {
                RangeStat& r = rs[group(e.name)];
                ++r.instances;
                r.cpuNs += e.duration();
            }
        }
        std::vector<const std::string*> seen;
        for (uint32_t i = 0; i < t.eventCount(); ++i) {
            const Event& e = t.event(i);
            if (e.kind != EventKind::Kernel)
                continue;
            uint32_t L = t.launchOf(i);
            if (L == kNone)
                continue;
            const Event& le = t.event(L);
            seen.clear();
            const Row& row = t.rows()[le.row];
            for (uint32_t lane = 0; lane < row.lanes.size(); ++lane)
                for (uint32_t ri : t.eventsInWindow(le.row, lane, le.start, le.start)) {
                    const Event& re = t.event(ri);
                    if (re.kind != EventKind::NvtxRange)
                        continue;
                    const std::string& g = group(re.name);
                    if (std::find(seen.begin(), seen.end(), &g) != seen.end())
                        continue;
                    seen.push_back(&g);
                    RangeStat& r = rs[g];
                    ++r.kernels;
                    r.gpuNs += e.duration();
                }
        }
        std::vector<RangeStat> ranges;
        for (auto& [name, r] : rs) {
            r.name = name;
            r.share = kernelNs > 0 ? static_cast<double>(r.gpuNs) / static_cast<double>(kernelNs) : 0;
            ranges.push_back(r);
        }
        std::sort(ranges.begin(), ranges.end(), [](const RangeStat& x, const RangeStat& y) {
            return x.gpuNs != y.gpuNs ? x.gpuNs > y.gpuNs : x.name < y.name;
        });
        if (ranges.size() > top)
            ranges.resize(top);
        return ranges;
    }

    // All devices together.
    struct GpuTotals {
        int64_t windowNs = 0, busyNs = 0;
        IdleBreakdown idle;
        int64_t idleNs() const { return windowNs - busyNs; }
        double idleFraction() const
        {
            return windowNs > 0 ? 1.0 - static_cast<double>(busyNs) / static_cast<double>(windowNs) : 0;
        }
    };

    GpuTotals totalsOf(const std::vector<DeviceBusy>& devices)
    {
        GpuTotals g;
        for (const auto& d : devices) {
            g.windowNs += d.windowNs;
            g.busyNs += d.busyNs;
            g.idle.hostNs += d.idle.hostNs;
            g.idle.launchNs += d.idle.launchNs;
            g.idle.syncNs += d.idle.syncNs;
            g.idle.queuedNs += d.idle.queuedNs;
            g.idle.unattributedNs += d.idle.unattributedNs;
        }
        return g;
    }

    // The bottleneck when the GPU idles for more than 30% of the time, by the idle time's cause; "" when the
    // idle time does not decide it (the kernels do).
    std::string idleBottleneck(const Analysis& a, const GpuTotals& g)
    {
        if (g.idleFraction() <= 0.3)
            return "";
        const IdleBreakdown& idle = g.idle;
        int64_t idleNs = g.idleNs();
        int64_t hostSide = idle.hostNs + idle.launchNs;
        if (a.launchPhaseIdleNs > idleNs / 3 && a.launchPhaseCount > 0)
            return "launch-overhead";
        if (idle.syncNs >= hostSide && idle.syncNs > idleNs / 3)
            return "synchronization";
        if (idle.launchNs > idle.hostNs)
            return "launch-overhead";
        if (hostSide > idleNs / 3)
            return "host-bound";
        // No launch records: the trace cannot say why; calling it GPU-bound would send the search to the kernels
        // while the GPU mostly waits.
        if (idle.unattributedNs > idleNs / 2)
            return "gpu-idle";
        return "";
    }

    std::string deviceFinding(const DeviceBusy& d)
    {
        int64_t di = d.windowNs - d.busyNs;
        std::string f = "GPU " + std::to_string(d.device) + (d.name.empty() ? "" : " (" + d.name + ")") + " busy "
            + pct(d.busyPct / 100) + " of " + formatNs(static_cast<double>(d.windowNs)) + "; idle "
            + formatNs(static_cast<double>(di));
        if (di > 0) {
            auto part = [&](const char* what, int64_t v) {
                return std::string(what) + " " + pct(static_cast<double>(v) / static_cast<double>(di));
            };
            f += " = " + part("host", d.idle.hostNs) + ", " + part("launch calls", d.idle.launchNs) + ", "
                + part("sync", d.idle.syncNs) + ", " + part("queued", d.idle.queuedNs);
            if (d.idle.unattributedNs)
                f += ", " + part("unattributed", d.idle.unattributedNs);
        }
        if (d.medianLaunchApiNs >= 0)
            f += "; median launch call " + formatNs(d.medianLaunchApiNs) + ", launch->start "
                + formatNs(d.medianLaunchLatencyNs);
        return f + ".";
    }

    std::string hostIdleFinding(const std::vector<std::pair<std::string, int64_t>>& ops, int64_t hostNs)
    {
        std::string f
            = "Host work while the GPU idled (" + formatNs(static_cast<double>(hostNs)) + ") was mostly inside: ";
        for (size_t i = 0; i < ops.size() && i < 3; ++i)
            f += (i ? ", " : "") + ops[i].first.substr(0, 80) + " " + formatNs(static_cast<double>(ops[i].second))
                + " (" + pct(static_cast<double>(ops[i].second) / static_cast<double>(hostNs)) + ")";
        return f + ".";
    }

    std::string gpuIdleFinding(const GpuTotals& g)
    {
        return "The GPU is idle " + pct(g.idleFraction())
            + " of the time and the trace has no CPU launch records to explain it ("
            + pct(static_cast<double>(g.idle.unattributedNs) / static_cast<double>(g.idleNs()))
            + " of the idle time unattributed): the cause is outside the trace; capture the CPU side too "
              "(PyTorch profiler with CPU activity, nsys --trace=cuda,osrt).";
    }

    std::string launchPhaseFinding(const LaunchPhase& p)
    {
        std::string f = "Launch-bound phase" + (p.label.empty() ? std::string() : " '" + p.label + "'") + " at "
            + formatNs(static_cast<double>(p.startNs)) + ": " + std::to_string(p.kernels) + " kernels in "
            + formatNs(static_cast<double>(p.endNs - p.startNs)) + ", GPU busy "
            + pct(static_cast<double>(p.busyNs) / static_cast<double>(std::max<int64_t>(1, p.endNs - p.startNs)))
            + ", median kernel " + formatNs(p.medianKernelNs) + ", median gap " + formatNs(p.medianGapNs);
        if (p.medianLaunchApiNs >= 0)
            f += ", median launch call " + formatNs(p.medianLaunchApiNs);
        return f + "; with CUDA graphs or fusion ~" + formatNs(static_cast<double>(p.estimatedWithGraphsNs)) + " ("
            + std::to_string(p.estimatedSpeedup).substr(0, 4) + "x).";
    }

    std::string kernelFinding(size_t rank, const KernelStat& k)
    {
        std::string f = "Kernel #" + std::to_string(rank) + " " + k.name.substr(0, 90) + ": " + pct(k.share)
            + " of GPU time, " + std::to_string(k.count) + " calls, median " + formatNs(k.medianNs);
        if (k.roofline.bound != "unknown") {
            f += ", " + k.roofline.bound + " (" + k.roofline.basis + ": DRAM " + pct(k.roofline.dramPct / 100);
            if (k.roofline.computePct >= 0)
                f += ", compute " + pct(k.roofline.computePct / 100);
            f += ")";
        }
        return f + ".";
    }

} // namespace

Analysis analyze(const Trace& t, const AnalysisOptions& opts)
{
    Analysis a;
    a.source = t.meta().source;
    a.events = t.eventCount();
    a.traceNs = t.endNs() - t.startNs();
    a.warnings = t.meta().warnings;
    a.ceilings = ceilingsOf(t, opts);
    const bool labelled = hasRanges(t);
    addKernelStats(a, t, opts);

    GpuWork work = gpuWorkOf(t);
    IdleAttribution idleCauses(t);
    for (const auto& [dev, items] : work.byDevice) {
        a.devices.push_back(deviceBusy(t, dev, items, work, idleCauses));
        for (auto& p : launchPhasesOf(t, dev, items, opts, a.ceilings.graphNodeNs, labelled)) {
            ++a.launchPhaseCount;
            a.launchPhaseIdleNs += (p.endNs - p.startNs) - p.busyNs;
            a.launchPhases.push_back(std::move(p));
        }
    }
    std::sort(a.launchPhases.begin(), a.launchPhases.end(), [](const LaunchPhase& x, const LaunchPhase& y) {
        return (x.endNs - x.startNs - x.busyNs) > (y.endNs - y.startNs - y.busyNs);
    });
    if (a.launchPhases.size() > 5)
        a.launchPhases.resize(5);
    if (labelled)
        a.ranges = rangeStats(t, a.kernelNs, opts.topRanges);

    if (a.devices.empty()) {
        a.bottleneck = "no-gpu-work";
        a.findings.push_back("The trace has no GPU kernels, copies or memsets.");
        return a;
    }
    const GpuTotals totals = totalsOf(a.devices);
    for (const auto& d : a.devices)
        a.findings.push_back(deviceFinding(d));
    a.hostIdleByCpuOp = idleCauses.topHostOps(5);
    if (!a.hostIdleByCpuOp.empty() && totals.idle.hostNs > totals.idleNs() / 10)
        a.findings.push_back(hostIdleFinding(a.hostIdleByCpuOp, totals.idle.hostNs));
    for (size_t i = 0; i < a.launchPhases.size() && i < 2; ++i)
        a.findings.push_back(launchPhaseFinding(a.launchPhases[i]));
    if (a.launchPhaseCount > 2)
        a.findings.push_back(std::to_string(a.launchPhaseCount) + " launch-bound phases in all, idle "
            + formatNs(static_cast<double>(a.launchPhaseIdleNs)) + " inside them.");
    for (size_t i = 0; i < a.kernels.size() && i < 3; ++i)
        a.findings.push_back(kernelFinding(i + 1, a.kernels[i]));

    a.bottleneck = idleBottleneck(a, totals);
    if (a.bottleneck == "gpu-idle")
        a.findings.insert(a.findings.begin(), gpuIdleFinding(totals));
    if (a.bottleneck.empty()) {
        const KernelStat& top = a.kernels.front();
        a.bottleneck = top.roofline.bound != "unknown" ? top.roofline.bound : "gpu-bound";
    }
    return a;
}

nlohmann::json toJson(const Analysis& a)
{
    using nlohmann::json;
    json j;
    j["source"] = a.source;
    j["events"] = a.events;
    j["trace_ns"] = a.traceNs;
    j["kernel_count"] = a.kernelCount;
    j["kernel_ns"] = a.kernelNs;
    j["kernel_names"] = a.kernelNames;
    j["bottleneck"] = a.bottleneck;
    j["findings"] = a.findings;
    j["ceilings"] = { { "device", a.ceilings.device }, { "dram_bytes_per_s", a.ceilings.dramBytesPerSec },
        { "fp32_flops_per_s", a.ceilings.fp32FlopsPerSec }, { "tensor_flops_per_s", a.ceilings.tensorFlopsPerSec } };
    json devs = json::array();
    for (const auto& d : a.devices) {
        json streams = json::array();
        for (const auto& s : d.streams)
            streams.push_back(
                { { "stream", s.stream }, { "busy_ns", s.busyNs }, { "busy_pct", s.busyPct }, { "items", s.items } });
        devs.push_back({ { "device", d.device }, { "name", d.name }, { "window_ns", d.windowNs },
            { "busy_ns", d.busyNs }, { "busy_pct", d.busyPct }, { "gaps", d.gaps },
            { "idle_ns",
                { { "host", d.idle.hostNs }, { "launch", d.idle.launchNs }, { "sync", d.idle.syncNs },
                    { "queued", d.idle.queuedNs }, { "unattributed", d.idle.unattributedNs } } },
            { "launches", d.launches }, { "median_launch_api_ns", d.medianLaunchApiNs },
            { "median_launch_latency_ns", d.medianLaunchLatencyNs }, { "streams", streams } });
    }
    j["devices"] = devs;
    json ks = json::array();
    for (const auto& k : a.kernels) {
        json r = { { "bound", k.roofline.bound }, { "basis", k.roofline.basis }, { "dram_pct", k.roofline.dramPct },
            { "compute_pct", k.roofline.computePct }, { "arithmetic_intensity", k.roofline.arithmeticIntensity } };
        ks.push_back({ { "name", k.name }, { "count", k.count }, { "total_ns", k.totalNs }, { "mean_ns", k.meanNs },
            { "median_ns", k.medianNs }, { "min_ns", k.minNs }, { "max_ns", k.maxNs }, { "share", k.share },
            { "grid", { k.grid[0], k.grid[1], k.grid[2] } }, { "block", { k.block[0], k.block[1], k.block[2] } },
            { "registers_per_thread", k.registersPerThread }, { "shared_memory", k.sharedMemory },
            { "est_occupancy_pct", k.estOccupancyPct }, { "achieved_occupancy_pct", k.achievedOccupancyPct },
            { "roofline", r } });
    }
    j["kernels"] = ks;
    json rs = json::array();
    for (const auto& r : a.ranges)
        rs.push_back({ { "name", r.name }, { "instances", r.instances }, { "cpu_ns", r.cpuNs },
            { "kernels", r.kernels }, { "gpu_ns", r.gpuNs }, { "share", r.share } });
    j["ranges"] = rs;
    json ps = json::array();
    for (const auto& p : a.launchPhases)
        ps.push_back({ { "device", p.device }, { "label", p.label }, { "start_ns", p.startNs }, { "end_ns", p.endNs },
            { "kernels", p.kernels }, { "busy_ns", p.busyNs }, { "median_kernel_ns", p.medianKernelNs },
            { "median_gap_ns", p.medianGapNs }, { "median_launch_api_ns", p.medianLaunchApiNs },
            { "estimated_with_graphs_ns", p.estimatedWithGraphsNs }, { "estimated_speedup", p.estimatedSpeedup } });
    j["launch_phases"] = ps;
    j["launch_phase_count"] = a.launchPhaseCount;
    j["launch_phase_idle_ns"] = a.launchPhaseIdleNs;
    json host = json::array();
    for (const auto& [name, ns] : a.hostIdleByCpuOp)
        host.push_back({ { "name", name }, { "ns", ns } });
    j["host_idle_by_cpu_op"] = host;
    j["warnings"] = a.warnings;
    return j;
}

std::string toText(const Analysis& a)
{
    std::string s;
    s += "Bottleneck: " + a.bottleneck + "\n";
    s += "Trace: " + a.source + ", " + std::to_string(a.events) + " events, " + std::to_string(a.kernelCount)
        + " kernels (" + std::to_string(a.kernelNames) + " distinct), kernel time "
        + formatNs(static_cast<double>(a.kernelNs)) + " over " + formatNs(static_cast<double>(a.traceNs)) + "\n";
    for (const auto& f : a.findings)
        s += "- " + f + "\n";
    if (!a.kernels.empty()) {
        s += "Top kernels (share, calls, median, launch config):\n";
        for (const auto& k : a.kernels) {
            char line[512];
            std::snprintf(line, sizeof line, "  %5.1f%%  %6llu  %10s  grid %u,%u,%u block %u,%u,%u regs %u  %s",
                k.share * 100, static_cast<unsigned long long>(k.count), formatNs(k.medianNs).c_str(), k.grid[0],
                k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2], k.registersPerThread,
                k.name.substr(0, 100).c_str());
            s += line;
            if (k.roofline.bound != "unknown")
                s += "  [" + k.roofline.bound + "]";
            s += "\n";
        }
    }
    if (!a.ranges.empty()) {
        s += "Ranges (GPU time of kernels launched inside):\n";
        for (size_t i = 0; i < a.ranges.size() && i < 8; ++i) {
            const auto& r = a.ranges[i];
            char line[384];
            std::snprintf(line, sizeof line, "  %5.1f%%  %s  x%llu  %s\n", r.share * 100,
                formatNs(static_cast<double>(r.gpuNs)).c_str(), static_cast<unsigned long long>(r.instances),
                r.name.substr(0, 80).c_str());
            s += line;
        }
    }
    if (a.ceilings.dramBytesPerSec > 0)
        s += "Ceilings: " + a.ceilings.device + "\n";
    for (const auto& w : a.warnings)
        s += "Warning: " + w + "\n";
    return s;
}

} // namespace kl::prof
