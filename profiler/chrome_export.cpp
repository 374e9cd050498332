#include "profiler/chrome_export.h"

#include "core/session_store.h"

#include <cstdio>

namespace kl::prof {
namespace {

    void appendEscaped(std::string& out, std::string_view s)
    {
        out.push_back('"');
        for (char ch : s) {
            auto c = static_cast<unsigned char>(ch);
            switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out.push_back(ch);
                }
            }
        }
        out.push_back('"');
    }

    // Nanoseconds as microseconds with three decimals, exactly (no double rounding).
    void appendMicros(std::string& out, int64_t ns)
    {
        char buf[48];
        bool neg = ns < 0;
        uint64_t v = neg ? static_cast<uint64_t>(-(ns + 1)) + 1 : static_cast<uint64_t>(ns);
        std::snprintf(buf, sizeof buf, "%s%llu.%03llu", neg ? "-" : "", static_cast<unsigned long long>(v / 1000),
            static_cast<unsigned long long>(v % 1000));
        out += buf;
    }

    const char* categoryOf(EventKind k)
    {
        switch (k) {
        case EventKind::Kernel:
            return "kernel";
        case EventKind::Memcpy:
            return "gpu_memcpy";
        case EventKind::Memset:
            return "gpu_memset";
        case EventKind::RuntimeApi:
            return "cuda_runtime";
        case EventKind::DriverApi:
            return "cuda_driver";
        case EventKind::NvtxRange:
            return "user_annotation";
        case EventKind::NvtxMark:
            return "user_annotation";
        case EventKind::GpuAnnotation:
            return "gpu_user_annotation";
        case EventKind::CpuOp:
            return "cpu_op";
        case EventKind::Sync:
            return "cuda_sync";
        case EventKind::Other:
            return "other";
        }
        return "other";
    }

} // namespace

std::string toChromeJson(const Trace& t)
{
    std::string out;
    out.reserve(t.eventCount() * 200 + 4096);
    out += "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":\"kloop trace export\",\"source\":";
    appendEscaped(out, t.meta().source);
    out += "},\"deviceProperties\":[";
    bool first = true;
    for (const auto& d : t.devices()) {
        out += first ? "" : ",";
        first = false;
        out += "{\"id\":" + std::to_string(d.id) + ",\"name\":";
        appendEscaped(out, d.name);
        out += ",\"numSms\":" + std::to_string(d.smCount) + ",\"computeMajor\":" + std::to_string(d.ccMajor)
            + ",\"computeMinor\":" + std::to_string(d.ccMinor)
            + ",\"totalGlobalMem\":" + std::to_string(d.globalMemBytes) + "}";
    }
    out += "],\"traceEvents\":[\n";
    first = true;
    auto sep = [&]() {
        if (!first)
            out += ",\n";
        first = false;
    };
    // Track naming: GPU rows become pid = device, tid = stream, as in PyTorch traces.
    for (const auto& p : t.processes()) {
        sep();
        out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(p.pid)
            + ",\"tid\":0,\"args\":{\"name\":";
        appendEscaped(out, p.name);
        out += "}}";
    }
    for (const auto& r : t.rows()) {
        sep();
        int64_t pid = r.kind == RowKind::GpuStream ? r.device : r.pid;
        out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(pid)
            + ",\"tid\":" + std::to_string(r.tid) + ",\"args\":{\"name\":";
        appendEscaped(out, t.strings().view(r.name));
        out += "}}";
    }
    const int64_t off = t.timeOffsetNs();
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        const Event& e = t.event(i);
        const Row& r = t.rows()[e.row];
        bool gpu = r.kind == RowKind::GpuStream;
        int64_t pid = gpu ? r.device : r.pid;
        sep();
        out += e.kind == EventKind::NvtxMark ? "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"" : "{\"ph\":\"X\",\"cat\":\"";
        out += categoryOf(e.kind);
        out += "\",\"name\":";
        appendEscaped(out, t.name(e));
        out += ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(r.tid) + ",\"ts\":";
        appendMicros(out, e.start + off);
        if (e.kind != EventKind::NvtxMark) {
            out += ",\"dur\":";
            appendMicros(out, e.duration());
        }
        out += ",\"args\":{";
        bool firstArg = true;
        auto arg = [&](const char* k, const std::string& v) {
            out += firstArg ? "\"" : ",\"";
            firstArg = false;
            out += k;
            out += "\":";
            out += v;
        };
        if (uint32_t corr = t.correlation(e))
            arg("correlation", std::to_string(corr));
        if (const KernelInfo* k = t.kernelInfo(e)) {
            arg("device", std::to_string(k->device));
            arg("stream", std::to_string(k->stream));
            arg("grid",
                "[" + std::to_string(k->grid[0]) + "," + std::to_string(k->grid[1]) + "," + std::to_string(k->grid[2])
                    + "]");
            arg("block",
                "[" + std::to_string(k->block[0]) + "," + std::to_string(k->block[1]) + ","
                    + std::to_string(k->block[2]) + "]");
            arg("registers per thread", std::to_string(k->registersPerThread));
            arg("shared memory", std::to_string(k->staticSharedMemory + k->dynamicSharedMemory));
            if (k->estOccupancyPct >= 0)
                arg("est. achieved occupancy %", std::to_string(static_cast<int>(k->estOccupancyPct + 0.5f)));
        } else if (const MemOpInfo* m = t.memOpInfo(e)) {
            arg("device", std::to_string(m->device));
            arg("stream", std::to_string(m->stream));
            arg("bytes", std::to_string(m->bytes));
        } else if (gpu) {
            arg("device", std::to_string(r.device));
            arg("stream", std::to_string(r.tid));
        }
        out += "}}";
    }
    // ac2g flows so Perfetto draws launch -> kernel arrows.
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        const Event& g = t.event(i);
        if (!isGpuWork(g.kind))
            continue;
        uint32_t L = t.launchOf(i);
        if (L == kNone)
            continue;
        const Event& l = t.event(L);
        const Row& lr = t.rows()[l.row];
        const Row& gr = t.rows()[g.row];
        uint32_t gc = t.correlation(g);
        std::string id = std::to_string(gc ? gc : i);
        sep();
        out += "{\"ph\":\"s\",\"id\":" + id + ",\"pid\":" + std::to_string(lr.pid)
            + ",\"tid\":" + std::to_string(lr.tid) + ",\"ts\":";
        appendMicros(out, l.start + off);
        out += ",\"cat\":\"ac2g\",\"name\":\"ac2g\"},\n";
        out += "{\"ph\":\"f\",\"id\":" + id + ",\"pid\":" + std::to_string(gr.device)
            + ",\"tid\":" + std::to_string(gr.tid) + ",\"ts\":";
        appendMicros(out, g.start + off);
        out += ",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}";
    }
    out += "\n]}\n";
    return out;
}

void exportChromeJsonFile(const Trace& t, const std::string& path)
{
    kl::writeFileAtomic(path, toChromeJson(t));
}

} // namespace kl::prof
