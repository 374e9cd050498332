// Chrome / Perfetto trace JSON importer, with the PyTorch profiler (Kineto) conventions:
// GPU rows are (args.device, args.stream); the launch API call and its kernel share args.correlation, and
// "ac2g" flow events link them when the correlation is missing.
#include "core/errors.h"
#include "profiler/importers.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

namespace kl::prof {
namespace {

    struct RawArgs {
        int64_t correlation = 0;
        int64_t device = -1;
        int64_t stream = -1;
        uint32_t grid[3] = { 0, 0, 0 };
        uint32_t block[3] = { 0, 0, 0 };
        bool hasGrid = false;
        int64_t registers = 0;
        int64_t sharedMemory = 0;
        double occupancy = -1;
        int64_t bytes = 0;
        std::string name; // metadata events
        OpInputs inputs; // record_shapes: "Input Dims", "Input type"
        void clear()
        {
            correlation = 0;
            device = stream = -1;
            hasGrid = false;
            std::fill(grid, grid + 3, 0u);
            std::fill(block, block + 3, 0u);
            registers = sharedMemory = bytes = 0;
            occupancy = -1;
            name.clear();
            inputs.dims.clear();
            inputs.types.clear();
        }
    };

    struct RawEvent {
        char ph = 0;
        std::string name;
        std::string cat;
        int64_t ts = 0;
        int64_t dur = 0;
        bool hasTs = false;
        bool hasDur = false;
        int64_t pid = 0;
        int64_t tid = 0;
        int64_t id = 0;
        bool hasId = false;
        RawArgs args;
        void clear()
        {
            ph = 0;
            name.clear();
            cat.clear();
            ts = dur = pid = tid = id = 0;
            hasTs = hasDur = hasId = false;
            args.clear();
        }
    };

    struct Flow {
        int64_t id;
        int64_t ts;
        uint32_t row;
        char ph;
    };

    struct OpenSlice {
        StrId name;
        uint16_t category;
        EventKind kind;
        uint32_t row;
        int64_t ts;
        uint32_t correlation;
    };

    inline bool eq(std::string_view a, const char* b)
    {
        return a == b;
    }
    constexpr size_t len(std::string_view s)
    {
        return s.size();
    }

    class ChromeImporter {
    public:
        ChromeImporter(ByteSource& src, const std::string& what, const ImportOptions& opts)
            : m_r(src, what)
            , m_opts(opts)
            , m_what(what)
        {
        }

        Trace run()
        {
            m_trace.meta().source = "chrome-json";
            m_trace.meta().path = m_what;
            char c = m_r.peek();
            if (c == '[') {
                parseEventArray(true);
            } else if (c == '{') {
                bool first = true;
                std::string_view key;
                bool sawEvents = false;
                while (m_r.nextMember(first, key)) {
                    if (eq(key, "traceEvents")) {
                        parseEventArray(false);
                        sawEvents = true;
                    } else if (eq(key, "deviceProperties")) {
                        parseDevices();
                    } else {
                        m_r.skipValue();
                    }
                }
                if (!sawEvents)
                    m_r.fail("no \"traceEvents\" array in the trace object");
            } else if (c == '\0') {
                m_r.fail("empty file");
            } else {
                m_r.fail(std::string("not a JSON trace: expected '{' or '[' but found '") + c + "'");
            }
            if (m_r.peek() != '\0')
                m_r.fail("unexpected data after the end of the trace");
            finish();
            return std::move(m_trace);
        }

    private:
        void parseDevices()
        {
            if (m_r.peek() != '[') {
                m_r.skipValue();
                return;
            }
            bool firstEl = true;
            while (m_r.nextElement(firstEl)) {
                if (m_r.peek() != '{') {
                    m_r.skipValue();
                    continue;
                }
                Device d;
                bool first = true;
                std::string_view key;
                while (m_r.nextMember(first, key)) {
                    if (eq(key, "id") && isNumber())
                        d.id = static_cast<int32_t>(m_r.readInt64());
                    else if (eq(key, "name") && m_r.peek() == '"')
                        d.name = std::string(m_r.readString());
                    else if (eq(key, "numSms") && isNumber())
                        d.smCount = static_cast<int32_t>(m_r.readInt64());
                    else if (eq(key, "computeMajor") && isNumber())
                        d.ccMajor = static_cast<int32_t>(m_r.readInt64());
                    else if (eq(key, "computeMinor") && isNumber())
                        d.ccMinor = static_cast<int32_t>(m_r.readInt64());
                    else if (eq(key, "totalGlobalMem") && isNumber())
                        d.globalMemBytes = static_cast<int64_t>(std::max(0.0, m_r.readDouble()));
                    else
                        m_r.skipValue();
                }
                m_trace.addDevice(std::move(d));
            }
        }

        bool isNumber()
        {
            char c = m_r.peek();
            return c == '-' || (c >= '0' && c <= '9');
        }

        void parseEventArray(bool topLevel)
        {
            m_r.expect('[');
            if (m_r.consumeIf(']'))
                return;
            for (;;) {
                parseEvent();
                char c = m_r.peek();
                if (c == ',') {
                    m_r.consumeIf(',');
                    if (topLevel && m_r.peek() == '\0') {
                        m_trace.meta().warnings.push_back("trace array ends without ']' (allowed by the format)");
                        return;
                    }
                    continue;
                }
                if (c == ']') {
                    m_r.consumeIf(']');
                    return;
                }
                if (c == '\0' && topLevel) {
                    m_trace.meta().warnings.push_back("trace array ends without ']' (allowed by the format)");
                    return;
                }
                if (c == '\0')
                    m_r.fail("unexpected end of input in traceEvents (file truncated?)");
                m_r.fail(std::string("expected ',' or ']' after event ") + std::to_string(m_count) + " but found '" + c
                    + "'");
            }
        }

        void readUint3(uint32_t out[3])
        {
            if (m_r.peek() != '[') {
                m_r.skipValue();
                return;
            }
            bool first = true;
            int i = 0;
            while (m_r.nextElement(first)) {
                if (i < 3 && isNumber())
                    out[i] = static_cast<uint32_t>(std::clamp<int64_t>(m_r.readInt64(), 0, 0xffffffffll));
                else
                    m_r.skipValue();
                ++i;
            }
        }

        // [[512, 4096], [], [[1, 2], [3, 4]]]: a tensor's sizes, a scalar, a tensor list (kept as no shape).
        void readInputDims(std::vector<std::vector<int64_t>>& out)
        {
            if (m_r.peek() != '[') {
                m_r.skipValue();
                return;
            }
            bool first = true;
            while (m_r.nextElement(first)) {
                auto& dims = out.emplace_back();
                if (m_r.peek() != '[') {
                    m_r.skipValue();
                    continue;
                }
                bool firstAxis = true, list = false;
                while (m_r.nextElement(firstAxis)) {
                    if (!list && isNumber()) {
                        dims.push_back(m_r.readInt64());
                        continue;
                    }
                    list = true;
                    m_r.skipValue();
                }
                if (list)
                    dims.clear();
            }
        }

        void readInputTypes(std::vector<std::string>& out)
        {
            if (m_r.peek() != '[') {
                m_r.skipValue();
                return;
            }
            bool first = true;
            while (m_r.nextElement(first)) {
                if (m_r.peek() == '"')
                    out.emplace_back(m_r.readString());
                else {
                    m_r.skipValue();
                    out.emplace_back();
                }
            }
        }

        void parseArgs(RawArgs& a)
        {
            if (m_r.peek() != '{') {
                m_r.skipValue();
                return;
            }
            bool first = true;
            std::string_view key;
            while (m_r.nextMember(first, key)) {
                switch (key.size()) {
                case 4:
                    if (eq(key, "grid")) {
                        readUint3(a.grid);
                        a.hasGrid = true;
                        continue;
                    }
                    if (eq(key, "name") && m_r.peek() == '"') {
                        a.name.assign(m_r.readString());
                        continue;
                    }
                    break;
                case 5:
                    if (eq(key, "block")) {
                        readUint3(a.block);
                        continue;
                    }
                    if (eq(key, "bytes") && isNumber()) {
                        a.bytes = m_r.readInt64();
                        continue;
                    }
                    break;
                case 6:
                    if (eq(key, "device") && isNumber()) {
                        a.device = m_r.readInt64();
                        continue;
                    }
                    if (eq(key, "stream") && isNumber()) {
                        a.stream = m_r.readInt64();
                        continue;
                    }
                    break;
                case len("Input Dims"):
                    if (eq(key, "Input Dims")) {
                        readInputDims(a.inputs.dims);
                        continue;
                    }
                    if (eq(key, "Input type")) {
                        readInputTypes(a.inputs.types);
                        continue;
                    }
                    break;
                case len("correlation"):
                    if (eq(key, "correlation") && isNumber()) {
                        a.correlation = m_r.readInt64();
                        continue;
                    }
                    break;
                case len("shared memory"):
                    if (eq(key, "shared memory") && isNumber()) {
                        a.sharedMemory = m_r.readInt64();
                        continue;
                    }
                    break;
                case len("registers per thread"):
                    if (eq(key, "registers per thread") && isNumber()) {
                        a.registers = m_r.readInt64();
                        continue;
                    }
                    break;
                case len("est. achieved occupancy %"):
                    if (eq(key, "est. achieved occupancy %") && isNumber()) {
                        a.occupancy = m_r.readDouble();
                        continue;
                    }
                    break;
                default:
                    break;
                }
                m_r.skipValue();
            }
        }

        int64_t readId(bool& isString, std::string& text)
        {
            char c = m_r.peek();
            if (c == '"') {
                isString = true;
                text.assign(m_r.readString());
                char* end = nullptr;
                long long v = std::strtoll(text.c_str(), &end, 10);
                if (!text.empty() && end && *end == '\0') {
                    isString = false;
                    return v;
                }
                return 0;
            }
            if (isNumber()) {
                isString = false;
                return m_r.readInt64();
            }
            m_r.skipValue();
            isString = false;
            return 0;
        }

        // pid/tid may be strings ("Spans", "stream 7"); give each distinct string a stable synthetic id.
        int64_t readTrackId(std::string& textOut)
        {
            bool isString = false;
            int64_t v = readId(isString, m_idText);
            if (!isString)
                return v;
            auto it = m_stringIds.find(m_idText);
            if (it == m_stringIds.end())
                it = m_stringIds.emplace(m_idText, (int64_t { 1 } << 40) + static_cast<int64_t>(m_stringIds.size()))
                         .first;
            textOut = m_idText;
            return it->second;
        }

        void parseEvent()
        {
            if (m_r.peek() != '{')
                m_r.fail("traceEvents[" + std::to_string(m_count) + "] is not an object");
            RawEvent& e = m_e;
            e.clear();
            m_pidText.clear();
            m_tidText.clear();
            bool first = true;
            std::string_view key;
            while (m_r.nextMember(first, key)) {
                switch (key.size()) {
                case 2:
                    if (key[0] == 'p' && key[1] == 'h' && m_r.peek() == '"') {
                        std::string_view v = m_r.readString();
                        e.ph = v.empty() ? '?' : v[0];
                        continue;
                    }
                    if (key[0] == 't' && key[1] == 's') {
                        e.ts = m_r.readMicrosAsNanos();
                        e.hasTs = true;
                        continue;
                    }
                    if (key[0] == 'i' && key[1] == 'd') {
                        bool isString = false;
                        e.id = readId(isString, m_idText);
                        if (isString)
                            e.id = static_cast<int64_t>(std::hash<std::string> {}(m_idText) >> 1);
                        e.hasId = true;
                        continue;
                    }
                    break;
                case 3:
                    if (eq(key, "pid")) {
                        e.pid = readTrackId(m_pidText);
                        continue;
                    }
                    if (eq(key, "tid")) {
                        e.tid = readTrackId(m_tidText);
                        continue;
                    }
                    if (eq(key, "cat") && m_r.peek() == '"') {
                        e.cat.assign(m_r.readString());
                        continue;
                    }
                    if (eq(key, "dur")) {
                        e.dur = m_r.readMicrosAsNanos();
                        e.hasDur = true;
                        continue;
                    }
                    break;
                case 4:
                    if (eq(key, "name") && m_r.peek() == '"') {
                        e.name.assign(m_r.readString());
                        continue;
                    }
                    if (eq(key, "args")) {
                        parseArgs(e.args);
                        continue;
                    }
                    break;
                default:
                    break;
                }
                m_r.skipValue();
            }
            ++m_count;
            dispatch(e);
            if ((m_count & 0xfff) == 0) {
                if (m_opts.cancel.cancelled())
                    throw ImportCancelled();
                m_r.releaseConsumed();
                if (m_opts.progress && (m_count & 0x3ffff) == 0) {
                    uint64_t total = m_r.inputBytesTotal();
                    double f = total ? static_cast<double>(m_r.inputBytesConsumed()) / static_cast<double>(total) : 0.0;
                    m_opts.progress(std::min(f, 1.0), "parsed " + std::to_string(m_count) + " events");
                }
            }
        }

        static EventKind kindOfCategory(std::string_view cat, bool& onGpu)
        {
            onGpu = false;
            if (cat == "kernel") {
                onGpu = true;
                return EventKind::Kernel;
            }
            if (cat == "gpu_memcpy") {
                onGpu = true;
                return EventKind::Memcpy;
            }
            if (cat == "gpu_memset") {
                onGpu = true;
                return EventKind::Memset;
            }
            if (cat == "gpu_user_annotation") {
                onGpu = true;
                return EventKind::GpuAnnotation;
            }
            if (cat == "cuda_runtime")
                return EventKind::RuntimeApi;
            if (cat == "cuda_driver")
                return EventKind::DriverApi;
            if (cat == "user_annotation" || cat == "nvtx")
                return EventKind::NvtxRange;
            if (cat == "cuda_sync")
                return EventKind::Sync;
            return EventKind::CpuOp;
        }

        struct TrackKey {
            int64_t pid, tid, device, stream;
            bool gpu;
            bool operator==(const TrackKey&) const = default;
        };
        struct TrackKeyHash {
            size_t operator()(const TrackKey& k) const
            {
                uint64_t h = static_cast<uint64_t>(k.pid) * 0x9E3779B97F4A7C15ull;
                h ^= static_cast<uint64_t>(k.tid) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
                h ^= static_cast<uint64_t>(k.device) * 31 + static_cast<uint64_t>(k.stream) * 1000003 + (k.gpu ? 7 : 0);
                return static_cast<size_t>(h);
            }
        };

        uint32_t rowFor(const RawEvent& e, bool onGpu)
        {
            TrackKey key { e.pid, e.tid, onGpu ? e.args.device : -1, onGpu ? e.args.stream : -1, onGpu };
            if (auto it = m_rowCache.find(key); it != m_rowCache.end())
                return it->second;
            uint32_t row;
            if (onGpu) {
                int64_t dev = e.args.device >= 0 ? e.args.device : e.pid;
                int64_t stream = e.args.stream >= 0 ? e.args.stream : e.tid;
                row = m_trace.gpuRow(static_cast<int32_t>(std::clamp<int64_t>(dev, -1, 1 << 20)), stream);
            } else {
                row = m_trace.cpuRow(e.pid, e.tid);
            }
            m_rowCache.emplace(key, row);
            m_trackRows.emplace(std::make_pair(e.pid, e.tid), row);
            return row;
        }

        uint16_t categoryId(const std::string& cat)
        {
            if (cat.empty())
                return 0;
            StrId id = m_trace.strings().intern(cat);
            return id < 0xffff ? static_cast<uint16_t>(id) : 0;
        }

        static StrId copyKindOf(Trace& t, std::string_view name, EventKind k)
        {
            if (k == EventKind::Memset)
                return t.strings().intern("memset");
            // Kineto: "Memcpy HtoD (Pageable -> Device)".
            auto sp = name.find(' ');
            if (sp != std::string_view::npos) {
                auto rest = name.substr(sp + 1);
                auto sp2 = rest.find(' ');
                return t.strings().intern(rest.substr(0, sp2));
            }
            return t.strings().intern("copy");
        }

        void emit(const RawEvent& e, EventKind kind, bool onGpu, int64_t start, int64_t end, StrId name, uint16_t cat)
        {
            Event ev;
            ev.start = start;
            ev.end = end;
            ev.name = name;
            ev.kind = kind;
            ev.category = cat;
            ev.row = rowFor(e, onGpu);
            auto corr = static_cast<uint32_t>(e.args.correlation);
            if (kind == EventKind::Kernel) {
                KernelInfo k;
                std::copy(e.args.grid, e.args.grid + 3, k.grid);
                std::copy(e.args.block, e.args.block + 3, k.block);
                k.registersPerThread = static_cast<uint32_t>(std::clamp<int64_t>(e.args.registers, 0, 1 << 20));
                k.dynamicSharedMemory = static_cast<uint32_t>(std::clamp<int64_t>(e.args.sharedMemory, 0, 1ll << 31));
                k.stream = static_cast<uint32_t>(e.args.stream >= 0 ? e.args.stream : e.tid);
                k.device = static_cast<int32_t>(e.args.device >= 0 ? e.args.device : e.pid);
                k.estOccupancyPct = static_cast<float>(e.args.occupancy);
                k.correlation = corr;
                m_trace.addKernel(ev, k);
            } else if (kind == EventKind::Memcpy || kind == EventKind::Memset) {
                MemOpInfo m;
                m.bytes = static_cast<uint64_t>(std::max<int64_t>(e.args.bytes, 0));
                m.copyKind = copyKindOf(m_trace, m_trace.strings().view(name), kind);
                m.stream = static_cast<uint32_t>(e.args.stream >= 0 ? e.args.stream : e.tid);
                m.device = static_cast<int32_t>(e.args.device >= 0 ? e.args.device : e.pid);
                m.correlation = corr;
                m_trace.addMemOp(ev, m);
            } else {
                const uint32_t index = m_trace.addEvent(ev, corr);
                if (kind == EventKind::CpuOp && (!e.args.inputs.dims.empty() || !e.args.inputs.types.empty()))
                    m_trace.setOpInputs(index, e.args.inputs);
            }
        }

        void dispatch(RawEvent& e)
        {
            switch (e.ph) {
            case 'X': {
                if (!e.hasTs)
                    return warnOnce("complete events without \"ts\" were skipped");
                bool onGpu = false;
                EventKind kind = kindOfCategory(e.cat, onGpu);
                if (kind == EventKind::Sync && e.args.stream >= 0)
                    onGpu = true;
                int64_t dur = std::max<int64_t>(e.dur, 0);
                emit(e, kind, onGpu, e.ts, e.ts + dur, m_trace.strings().intern(e.name), categoryId(e.cat));
                return;
            }
            case 'B': {
                if (!e.hasTs)
                    return warnOnce("begin events without \"ts\" were skipped");
                bool onGpu = false;
                EventKind kind = kindOfCategory(e.cat, onGpu);
                if (kind == EventKind::Kernel || kind == EventKind::Memcpy || kind == EventKind::Memset)
                    kind = EventKind::CpuOp; // GPU work needs X events with args; B/E is CPU-side only
                uint32_t row = rowFor(e, false);
                auto& stack = m_open[row];
                if (stack.size() > 100000)
                    return warnOnce("more than 100000 nested open 'B' events on one thread; extra ones skipped");
                stack.push_back({ m_trace.strings().intern(e.name), categoryId(e.cat), kind, row, e.ts,
                    static_cast<uint32_t>(e.args.correlation) });
                return;
            }
            case 'E': {
                uint32_t row = rowFor(e, false);
                auto it = m_open.find(row);
                if (it == m_open.end() || it->second.empty())
                    return warnOnce("'E' events without a matching 'B' were skipped");
                OpenSlice o = it->second.back();
                it->second.pop_back();
                Event ev;
                ev.start = o.ts;
                ev.end = std::max(o.ts, e.ts);
                ev.name = o.name;
                ev.kind = o.kind;
                ev.category = o.category;
                ev.row = o.row;
                m_trace.addEvent(ev, o.correlation);
                return;
            }
            case 'i':
            case 'I':
            case 'R':
            case 'n': {
                if (!e.hasTs)
                    return;
                bool onGpu = false;
                EventKind kind = kindOfCategory(e.cat, onGpu);
                if (kind != EventKind::CpuOp && kind != EventKind::NvtxRange)
                    onGpu = false;
                Event ev;
                ev.start = ev.end = e.ts;
                ev.name = m_trace.strings().intern(e.name);
                ev.kind = EventKind::NvtxMark;
                ev.category = categoryId(e.cat);
                ev.row = rowFor(e, false);
                m_trace.addEvent(ev);
                return;
            }
            case 's':
            case 'f':
            case 't': {
                if (!e.hasId || !e.hasTs || e.ph == 't')
                    return;
                bool toGpu = e.ph == 'f' && (e.cat == "ac2g" || e.cat == "async_gpu");
                uint32_t row;
                if (toGpu) {
                    auto it = m_trackRows.find({ e.pid, e.tid });
                    row = it != m_trackRows.end() ? it->second : m_trace.gpuRow(static_cast<int32_t>(e.pid), e.tid);
                } else {
                    row = rowFor(e, false);
                }
                m_flows.push_back({ e.id, e.ts, row, e.ph });
                return;
            }
            case 'M': {
                if (e.name == "process_name" && !e.args.name.empty()) {
                    m_trace.setProcessName(e.pid, e.args.name);
                } else if (e.name == "thread_name" && !e.args.name.empty()) {
                    m_threadNames[{ e.pid, e.tid }] = e.args.name;
                }
                return;
            }
            default:
                return; // counters ('C'), async ('b'/'e'), object events: not part of the model
            }
        }

        void warnOnce(const std::string& w)
        {
            auto& v = m_trace.meta().warnings;
            if (std::find(v.begin(), v.end(), w) == v.end())
                v.push_back(w);
        }

        void finish()
        {
            for (auto& [row, stack] : m_open)
                if (!stack.empty())
                    warnOnce("some 'B' events were never closed and were dropped");
            resolveFlows();
            for (const auto& [track, name] : m_threadNames) {
                auto it = m_trackRows.find(track);
                if (it != m_trackRows.end() && m_trace.rows()[it->second].kind == RowKind::CpuThread)
                    m_trace.setRowName(it->second, name + " (" + std::to_string(track.second) + ")");
            }
            if (m_opts.progress)
                m_opts.progress(1.0, "parsed " + std::to_string(m_count) + " events; indexing");
            m_trace.finalize();
        }

        // Flow pairs whose ends bind to a launch call and a GPU event that lack a correlation id get one, so the
        // trace's correlation linking covers them.
        void resolveFlows()
        {
            if (m_flows.empty())
                return;
            std::unordered_map<int64_t, std::pair<int, int>> byId; // id -> (start flow index, finish flow index)
            for (size_t i = 0; i < m_flows.size(); ++i) {
                auto& slot = byId.try_emplace(m_flows[i].id, std::make_pair(-1, -1)).first->second;
                (m_flows[i].ph == 's' ? slot.first : slot.second) = static_cast<int>(i);
            }
            // Index events without correlation by row for the lookups.
            std::map<std::pair<uint32_t, int64_t>, uint32_t> gpuByStart;
            std::unordered_map<uint32_t, std::vector<uint32_t>> apiByRow;
            const auto& evs = m_trace.events();
            for (uint32_t i = 0; i < evs.size(); ++i) {
                const Event& ev = evs[i];
                if (m_trace.correlation(ev) != 0)
                    continue;
                if (isGpuWork(ev.kind))
                    gpuByStart.emplace(std::make_pair(ev.row, ev.start), i);
                else if (ev.kind == EventKind::RuntimeApi || ev.kind == EventKind::DriverApi)
                    apiByRow[ev.row].push_back(i);
            }
            if (gpuByStart.empty())
                return;
            for (auto& [row, v] : apiByRow)
                std::sort(v.begin(), v.end(), [&](uint32_t a, uint32_t b) { return evs[a].start < evs[b].start; });
            for (const auto& [id, pair] : byId) {
                if (pair.first < 0 || pair.second < 0)
                    continue;
                const Flow& s = m_flows[static_cast<size_t>(pair.first)];
                const Flow& f = m_flows[static_cast<size_t>(pair.second)];
                auto g = gpuByStart.find({ f.row, f.ts });
                auto a = apiByRow.find(s.row);
                if (g == gpuByStart.end() || a == apiByRow.end())
                    continue;
                auto& v = a->second;
                auto it = std::upper_bound(
                    v.begin(), v.end(), s.ts, [&](int64_t t, uint32_t i) { return t < evs[i].start; });
                if (it == v.begin())
                    continue;
                uint32_t api = *(it - 1);
                if (evs[api].end < s.ts)
                    continue;
                m_trace.addLink(api, g->second);
            }
        }

        JsonReader m_r;
        const ImportOptions& m_opts;
        std::string m_what;
        Trace m_trace;
        RawEvent m_e;
        std::string m_idText, m_pidText, m_tidText;
        std::unordered_map<std::string, int64_t> m_stringIds;
        std::map<std::pair<int64_t, int64_t>, uint32_t> m_trackRows;
        std::map<std::pair<int64_t, int64_t>, std::string> m_threadNames;
        std::unordered_map<uint32_t, std::vector<OpenSlice>> m_open;
        std::vector<Flow> m_flows;
        std::unordered_map<TrackKey, uint32_t, TrackKeyHash> m_rowCache;
        size_t m_count = 0;
    };

} // namespace

Trace importChromeJson(ByteSource& src, const std::string& what, const ImportOptions& opts)
{
    ChromeImporter imp(src, what, opts);
    return imp.run();
}

Trace importChromeJsonFile(const std::string& path, const ImportOptions& opts)
{
    auto src = openFileSource(path);
    return importChromeJson(*src, path, opts);
}

} // namespace kl::prof
