// KernelLoop's own capture format (.kltrace), written by the CUPTI collector: one JSON object per line.
//   {"kltrace":1,"pid":P,"cmd":"..."}                                            header (first line)
//   {"t":"dev","id":0,"name":"NVIDIA H200","sms":132,"cc":[9,0],"mem":B}         device
//   {"t":"k","s":ns,"e":ns,"d":dev,"q":stream,"r":corr,"n":"name","g":[x,y,z],"b":[x,y,z],"reg":R,"ss":S,"ds":D}
//   {"t":"mc"|"ms","s":ns,"e":ns,"d":dev,"q":stream,"r":corr,"B":bytes,"kind":"HtoD"}   memcpy / memset
//   {"t":"api","s":ns,"e":ns,"p":pid,"th":tid,"r":corr,"n":"cudaLaunchKernel","drv":0|1}
//   {"t":"m","ts":ns,"id":I,"f":flags,"p":pid,"th":tid,"n":"name"}               NVTX marker (CUPTI flags)
//   {"t":"sol","n":"kernel","i":ordinal,"dur":ns,"dram":pct,"sm":pct,"occ":pct,"dramB":bytes}
//       ordinal: of the kernel in the whole capture by start time, or with "d" and "q" within that GPU row
//   {"t":"row","d":dev,"q":stream,"n":"baseline"}                                names a GPU row
//   {"t":"drop","i":count}   {"t":"warn","n":"text"}
// Times are CUPTI nanoseconds. Unknown record types and keys are skipped, so newer writers stay readable.
#include "core/errors.h"
#include "profiler/importers.h"

#include <algorithm>
#include <unordered_map>

namespace kl::prof {
namespace {

    struct Rec {
        std::string t, n, kind;
        int64_t s = 0, e = 0, ts = 0, d = 0, q = 0, r = 0, p = 0, th = 0, id = 0, f = 0, reg = 0, ss = 0, ds = 0, B = 0;
        int64_t sms = 0, mem = 0, i = -1;
        bool drv = false, hasQ = false;
        uint32_t g[3] = { 0, 0, 0 }, b[3] = { 0, 0, 0 }, cc[2] = { 0, 0 };
        double dur = -1, dram = -1, sm = -1, occ = -1, dramB = -1;
        bool header = false;
        void clear() { *this = Rec {}; }
    };

    void readTriple(JsonReader& r, uint32_t* out, int n)
    {
        bool first = true;
        int i = 0;
        while (r.nextElement(first)) {
            int64_t v = r.readInt64();
            if (i < n)
                out[i] = static_cast<uint32_t>(std::clamp<int64_t>(v, 0, 0xffffffffll));
            ++i;
        }
    }

} // namespace

Trace importKlTrace(ByteSource& src, const std::string& what, const ImportOptions& opts)
{
    JsonReader r(src, what);
    Trace t;
    t.meta().source = "kltrace";
    t.meta().path = what;
    Rec rec;
    size_t count = 0;
    bool sawHeader = false;
    struct OpenMarker {
        int64_t ts;
        StrId name;
        uint32_t row;
    };
    std::unordered_map<int64_t, OpenMarker> openMarkers;
    std::vector<SolMetrics> sol;
    std::vector<uint32_t> solRow; // kNone: ordinal over the whole capture
    uint64_t dropped = 0;
    while (r.peek() != '\0') {
        rec.clear();
        bool first = true;
        std::string_view key;
        while (r.nextMember(first, key)) {
            if (key == "t")
                rec.t.assign(r.readString());
            else if (key == "n")
                rec.n.assign(r.readString());
            else if (key == "kind")
                rec.kind.assign(r.readString());
            else if (key == "kltrace") {
                rec.header = true;
                r.skipValue();
            } else if (key == "s")
                rec.s = r.readInt64();
            else if (key == "e")
                rec.e = r.readInt64();
            else if (key == "ts")
                rec.ts = r.readInt64();
            else if (key == "d")
                rec.d = r.readInt64();
            else if (key == "q") {
                rec.q = r.readInt64();
                rec.hasQ = true;
            } else if (key == "r")
                rec.r = r.readInt64();
            else if (key == "p")
                rec.p = r.readInt64();
            else if (key == "th")
                rec.th = r.readInt64();
            else if (key == "id")
                rec.id = r.readInt64();
            else if (key == "f")
                rec.f = r.readInt64();
            else if (key == "reg")
                rec.reg = r.readInt64();
            else if (key == "ss")
                rec.ss = r.readInt64();
            else if (key == "ds")
                rec.ds = r.readInt64();
            else if (key == "B")
                rec.B = r.readInt64();
            else if (key == "sms")
                rec.sms = r.readInt64();
            else if (key == "mem")
                rec.mem = r.readInt64();
            else if (key == "i")
                rec.i = r.readInt64();
            else if (key == "drv")
                rec.drv = r.readInt64() != 0;
            else if (key == "g")
                readTriple(r, rec.g, 3);
            else if (key == "b")
                readTriple(r, rec.b, 3);
            else if (key == "cc")
                readTriple(r, rec.cc, 2);
            else if (key == "dur")
                rec.dur = r.readDouble();
            else if (key == "dram")
                rec.dram = r.readDouble();
            else if (key == "sm")
                rec.sm = r.readDouble();
            else if (key == "occ")
                rec.occ = r.readDouble();
            else if (key == "dramB")
                rec.dramB = r.readDouble();
            else
                r.skipValue();
        }
        if (!sawHeader) {
            if (!rec.header)
                r.fail("not a .kltrace file: the first record has no \"kltrace\" version");
            sawHeader = true;
            continue;
        }
        ++count;
        if ((count & 0xfff) == 0) {
            if (opts.cancel.cancelled())
                throw ImportCancelled();
            if (opts.progress && r.inputBytesTotal())
                opts.progress(static_cast<double>(r.inputBytesConsumed()) / static_cast<double>(r.inputBytesTotal()),
                    "parsed " + std::to_string(count) + " records");
        }
        const std::string& ty = rec.t;
        int32_t dev = static_cast<int32_t>(std::clamp<int64_t>(rec.d, -1, 1 << 20));
        if (ty == "k") {
            Event e;
            e.start = rec.s;
            e.end = std::max(rec.s, rec.e);
            e.name = t.strings().intern(rec.n);
            e.row = t.gpuRow(dev, rec.q);
            KernelInfo k;
            k.correlation = static_cast<uint32_t>(rec.r);
            std::copy(rec.g, rec.g + 3, k.grid);
            std::copy(rec.b, rec.b + 3, k.block);
            k.registersPerThread = static_cast<uint32_t>(std::clamp<int64_t>(rec.reg, 0, 1 << 20));
            k.staticSharedMemory = static_cast<uint32_t>(std::clamp<int64_t>(rec.ss, 0, 1ll << 31));
            k.dynamicSharedMemory = static_cast<uint32_t>(std::clamp<int64_t>(rec.ds, 0, 1ll << 31));
            k.stream = static_cast<uint32_t>(rec.q);
            k.device = dev;
            t.addKernel(e, k);
        } else if (ty == "mc" || ty == "ms") {
            Event e;
            e.start = rec.s;
            e.end = std::max(rec.s, rec.e);
            bool set = ty == "ms";
            e.kind = set ? EventKind::Memset : EventKind::Memcpy;
            e.name = t.strings().intern(set ? "Memset" : "Memcpy " + rec.kind);
            e.row = t.gpuRow(dev, rec.q);
            MemOpInfo m;
            m.correlation = static_cast<uint32_t>(rec.r);
            m.bytes = static_cast<uint64_t>(std::max<int64_t>(rec.B, 0));
            m.copyKind = t.strings().intern(set ? "memset" : rec.kind);
            m.stream = static_cast<uint32_t>(rec.q);
            m.device = dev;
            t.addMemOp(e, m);
        } else if (ty == "api") {
            Event e;
            e.start = rec.s;
            e.end = std::max(rec.s, rec.e);
            e.kind = rec.drv ? EventKind::DriverApi : EventKind::RuntimeApi;
            e.name = t.strings().intern(rec.n);
            e.row = t.cpuRow(rec.p, rec.th);
            t.addEvent(e, static_cast<uint32_t>(rec.r));
        } else if (ty == "m") {
            uint32_t row = t.cpuRow(rec.p, rec.th);
            if (rec.f & 0x1) { // instantaneous
                Event e;
                e.start = e.end = rec.ts;
                e.kind = EventKind::NvtxMark;
                e.name = t.strings().intern(rec.n);
                e.row = row;
                t.addEvent(e);
            } else if (rec.f & 0x2) { // range start
                if (openMarkers.size() < 1000000)
                    openMarkers[rec.id] = { rec.ts, t.strings().intern(rec.n), row };
            } else if (rec.f & 0x4) { // range end
                auto it = openMarkers.find(rec.id);
                if (it != openMarkers.end()) {
                    Event e;
                    e.start = it->second.ts;
                    e.end = std::max(it->second.ts, rec.ts);
                    e.kind = EventKind::NvtxRange;
                    e.name = it->second.name;
                    e.row = it->second.row;
                    t.addEvent(e);
                    openMarkers.erase(it);
                }
            }
        } else if (ty == "dev") {
            Device d;
            d.id = dev;
            d.name = rec.n;
            d.smCount = static_cast<int32_t>(rec.sms);
            d.ccMajor = static_cast<int32_t>(rec.cc[0]);
            d.ccMinor = static_cast<int32_t>(rec.cc[1]);
            d.globalMemBytes = static_cast<int64_t>(std::max<int64_t>(rec.mem, 0));
            t.addDevice(std::move(d));
        } else if (ty == "sol") {
            SolMetrics m;
            m.name = rec.n;
            m.event = static_cast<uint32_t>(rec.i); // kernel ordinal; mapped to an event index below
            m.durationNs = rec.dur;
            m.dramThroughputPct = rec.dram;
            m.smThroughputPct = rec.sm;
            m.achievedOccupancyPct = rec.occ;
            m.dramBytes = rec.dramB;
            sol.push_back(std::move(m));
            solRow.push_back(rec.hasQ ? t.gpuRow(dev, rec.q) : kNone);
        } else if (ty == "row") {
            if (rec.hasQ)
                t.setRowName(t.gpuRow(dev, rec.q), rec.n);
        } else if (ty == "drop") {
            dropped += static_cast<uint64_t>(std::max<int64_t>(rec.i, 0));
        } else if (ty == "warn") {
            t.meta().warnings.push_back(rec.n);
        }
    }
    if (!sawHeader)
        r.fail("empty .kltrace file");
    if (!openMarkers.empty())
        t.meta().warnings.push_back(std::to_string(openMarkers.size()) + " NVTX ranges were never closed");
    if (dropped)
        t.meta().warnings.push_back(
            "CUPTI dropped " + std::to_string(dropped) + " activity records (buffers full); the trace is incomplete");
    t.finalize();
    // SOL records name kernels by their launch ordinal within the capture; map them to event indices.
    std::vector<uint32_t> kernels;
    for (uint32_t i = 0; i < t.eventCount(); ++i)
        if (t.event(i).kind == EventKind::Kernel)
            kernels.push_back(i);
    std::sort(
        kernels.begin(), kernels.end(), [&](uint32_t a, uint32_t b) { return t.event(a).start < t.event(b).start; });
    std::unordered_map<uint32_t, std::vector<uint32_t>> kernelsByRow;
    for (uint32_t k : kernels)
        kernelsByRow[t.event(k).row].push_back(k);
    for (size_t s = 0; s < sol.size(); ++s) {
        SolMetrics& m = sol[s];
        const std::vector<uint32_t>& pool = solRow[s] == kNone ? kernels : kernelsByRow[solRow[s]];
        m.event = m.event < pool.size() ? pool[m.event] : kNone;
        t.addSol(std::move(m));
    }
    return t;
}

Trace importKlTraceFile(const std::string& path, const ImportOptions& opts)
{
    auto src = openFileSource(path);
    return importKlTrace(*src, path, opts);
}

} // namespace kl::prof
