#include "profiler/cupti/collector.h"

#include "profiler/cupti/kernel_activity.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cupti.h>
#include <cxxabi.h>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kl::prof::cupti {
namespace {

    // The one place to bump when CUPTI's record versions change (CUDA 13.0: Memcpy6, Memset4, Device5; the kernel
    // record's is in kernel_activity.h).
    using MemcpyRecord = CUpti_ActivityMemcpy6;
    using MemsetRecord = CUpti_ActivityMemset4;
    using DeviceRecord = CUpti_ActivityDevice5;
    using MarkerRecord = CUpti_ActivityMarker2;

    constexpr size_t kBufferBytes = 8u << 20;

    std::mutex g_sinkMutex;
    LineSink g_sink;
    std::atomic<bool> g_active { false };
    std::atomic<uint64_t> g_dropped { 0 };
    CollectorOptions g_opts;
    std::unordered_map<const char*, std::string> g_demangled; // CUPTI keeps function names alive

    const std::string& demangled(const char* name)
    {
        auto it = g_demangled.find(name);
        if (it != g_demangled.end())
            return it->second;
        int status = 0;
        char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
        std::string s = status == 0 && d ? d : name;
        std::free(d);
        return g_demangled.emplace(name, std::move(s)).first->second;
    }

    const char* copyKindName(uint8_t k)
    {
        switch (k) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
            return "HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
            return "DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
            return "HtoA";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
            return "AtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
            return "AtoA";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
            return "AtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
            return "DtoA";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
            return "DtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
            return "HtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
            return "PtoP";
        default:
            return "unknown";
        }
    }

    void appendRecord(std::string& out, const CUpti_Activity* r)
    {
        char buf[512];
        if (const KernelActivity* k = asKernelActivity(r)) {
            const KernelRecord rec = kernelRecord(*k);
            std::snprintf(buf, sizeof buf,
                "{\"t\":\"k\",\"s\":%llu,\"e\":%llu,\"d\":%u,\"q\":%u,\"r\":%u,\"g\":[%d,%d,%d],\"b\":[%d,%d,%d],"
                "\"reg\":%d,\"ss\":%d,\"ds\":%d,\"n\":",
                static_cast<unsigned long long>(rec.startNs), static_cast<unsigned long long>(rec.endNs), k->deviceId,
                rec.stream, rec.correlation, rec.grid[0], rec.grid[1], rec.grid[2], rec.block[0], rec.block[1],
                rec.block[2], rec.registers, rec.staticShared, rec.dynamicShared);
            out += buf;
            // Demangled once per name: CUPTI keeps the name alive, so its address identifies it.
            out += jsonEscape(k->name ? demangled(k->name) : std::string("?"));
            out += "}\n";
            return;
        }
        switch (r->kind) {
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            auto* m = reinterpret_cast<const MemcpyRecord*>(r);
            std::snprintf(buf, sizeof buf,
                "{\"t\":\"mc\",\"s\":%llu,\"e\":%llu,\"d\":%u,\"q\":%u,\"r\":%u,\"B\":%llu,\"kind\":\"%s\"}\n",
                static_cast<unsigned long long>(m->start), static_cast<unsigned long long>(m->end), m->deviceId,
                m->streamId, m->correlationId, static_cast<unsigned long long>(m->bytes), copyKindName(m->copyKind));
            out += buf;
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            auto* m = reinterpret_cast<const MemsetRecord*>(r);
            std::snprintf(buf, sizeof buf,
                "{\"t\":\"ms\",\"s\":%llu,\"e\":%llu,\"d\":%u,\"q\":%u,\"r\":%u,\"B\":%llu}\n",
                static_cast<unsigned long long>(m->start), static_cast<unsigned long long>(m->end), m->deviceId,
                m->streamId, m->correlationId, static_cast<unsigned long long>(m->bytes));
            out += buf;
            break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
            auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(r);
            bool drv = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
            const char* name = nullptr;
            cuptiGetCallbackName(drv ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
            std::string n = name ? name : "?";
            // CUPTI names carry the API version ("cudaLaunchKernel_v7000"); the tools show the plain name.
            if (auto v = n.rfind("_v"); v != std::string::npos && v + 2 < n.size()
                && n.find_first_not_of("0123456789", v + 2) == std::string::npos)
                n.resize(v);
            std::snprintf(buf, sizeof buf,
                "{\"t\":\"api\",\"s\":%llu,\"e\":%llu,\"p\":%u,\"th\":%u,\"r\":%u,\"drv\":%d,\"n\":",
                static_cast<unsigned long long>(a->start), static_cast<unsigned long long>(a->end), a->processId,
                a->threadId, a->correlationId, drv ? 1 : 0);
            out += buf;
            out += jsonEscape(n);
            out += "}\n";
            break;
        }
        case CUPTI_ACTIVITY_KIND_MARKER: {
            auto* m = reinterpret_cast<const MarkerRecord*>(r);
            uint32_t pid = 0, tid = 0;
            if (m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD || m->objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS) {
                pid = m->objectId.pt.processId;
                tid = m->objectId.pt.threadId;
            }
            std::snprintf(buf, sizeof buf, "{\"t\":\"m\",\"ts\":%llu,\"id\":%u,\"f\":%u,\"p\":%u,\"th\":%u,\"n\":",
                static_cast<unsigned long long>(m->timestamp), m->id, static_cast<unsigned>(m->flags), pid, tid);
            out += buf;
            out += jsonEscape(m->name ? m->name : "");
            out += "}\n";
            break;
        }
        case CUPTI_ACTIVITY_KIND_DEVICE: {
            auto* d = reinterpret_cast<const DeviceRecord*>(r);
            std::snprintf(buf, sizeof buf,
                "{\"t\":\"dev\",\"id\":%u,\"sms\":%u,\"cc\":[%u,%u],\"mem\":%llu,\"d\":%u,\"n\":", d->id,
                d->numMultiprocessors, d->computeCapabilityMajor, d->computeCapabilityMinor,
                static_cast<unsigned long long>(d->globalMemorySize), d->id);
            out += buf;
            out += jsonEscape(d->name ? d->name : "");
            out += "}\n";
            break;
        }
        default:
            break;
        }
    }

    void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords)
    {
        *size = kBufferBytes;
        *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
        *maxNumRecords = 0;
    }

    void CUPTIAPI bufferCompleted(CUcontext ctx, uint32_t streamId, uint8_t* buffer, size_t, size_t validSize)
    {
        std::string lines;
        lines.reserve(validSize / 2 + 256);
        {
            std::lock_guard<std::mutex> lock(g_sinkMutex);
            CUpti_Activity* r = nullptr;
            while (cuptiActivityGetNextRecord(buffer, validSize, &r) == CUPTI_SUCCESS)
                appendRecord(lines, r);
            size_t dropped = 0;
            if (cuptiActivityGetNumDroppedRecords(ctx, streamId, &dropped) == CUPTI_SUCCESS && dropped) {
                g_dropped += dropped;
                lines += "{\"t\":\"drop\",\"i\":" + std::to_string(dropped) + "}\n";
            }
            if (g_sink && !lines.empty())
                g_sink(lines);
        }
        std::free(buffer);
    }

    std::string err(const char* what, CUptiResult rc)
    {
        const char* s = nullptr;
        cuptiGetResultString(rc, &s);
        return std::string(what) + ": " + (s ? s : "unknown CUPTI error");
    }

} // namespace

std::string jsonEscape(const std::string& s)
{
    std::string out = "\"";
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(ch);
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
        } else {
            out.push_back(ch);
        }
    }
    return out + "\"";
}

std::string headerLine(int64_t pid, const std::string& command)
{
    uint32_t version = 0;
    cuptiGetVersion(&version);
    return "{\"kltrace\":1,\"pid\":" + std::to_string(pid) + ",\"cupti\":" + std::to_string(version)
        + ",\"cmd\":" + jsonEscape(command) + "}\n";
}

std::string startCollection(const CollectorOptions& opts, LineSink sink)
{
    if (g_active.exchange(true))
        return "a CUPTI collection is already running in this process";
    {
        std::lock_guard<std::mutex> lock(g_sinkMutex);
        g_sink = std::move(sink);
    }
    g_opts = opts;
    g_dropped = 0;
    CUptiResult rc = cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted);
    if (rc != CUPTI_SUCCESS) {
        g_active = false;
        return err("cuptiActivityRegisterCallbacks", rc);
    }
    // CONCURRENT_KERNEL, not KERNEL: the latter serializes every kernel and changes what we measure.
    std::pair<CUpti_ActivityKind, bool> kinds[] = {
        { CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, true },
        { CUPTI_ACTIVITY_KIND_RUNTIME, opts.runtimeApi },
        { CUPTI_ACTIVITY_KIND_DRIVER, opts.driverApi },
        { CUPTI_ACTIVITY_KIND_MEMCPY, opts.memory },
        { CUPTI_ACTIVITY_KIND_MEMSET, opts.memory },
        { CUPTI_ACTIVITY_KIND_MARKER, opts.markers },
        { CUPTI_ACTIVITY_KIND_DEVICE, opts.devices },
    };
    for (auto [kind, on] : kinds) {
        if (!on)
            continue;
        rc = cuptiActivityEnable(kind);
        // DEVICE records can only be enabled before CUDA initialises; in-process capture starts later.
        if (rc != CUPTI_SUCCESS && kind != CUPTI_ACTIVITY_KIND_DEVICE) {
            g_active = false;
            return err("cuptiActivityEnable", rc);
        }
    }
    if (opts.flushPeriodMs)
        cuptiActivityFlushPeriod(opts.flushPeriodMs);
    return {};
}

std::string flushCollection()
{
    CUptiResult rc = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    return rc == CUPTI_SUCCESS ? std::string() : err("cuptiActivityFlushAll", rc);
}

std::string stopCollection()
{
    if (!g_active)
        return {};
    CUpti_ActivityKind kinds[] = { CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
        CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MARKER,
        CUPTI_ACTIVITY_KIND_DEVICE };
    for (auto k : kinds)
        cuptiActivityDisable(k);
    std::string e = flushCollection();
    {
        std::lock_guard<std::mutex> lock(g_sinkMutex);
        g_sink = nullptr;
    }
    g_active = false;
    return e;
}

bool collectionActive()
{
    return g_active;
}
uint64_t droppedRecords()
{
    return g_dropped;
}

} // namespace kl::prof::cupti
