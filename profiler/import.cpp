#include "core/errors.h"
#include "profiler/importers.h"

#include <cstdio>
#include <cstring>

namespace kl::prof {

TraceFormat detectFormat(const std::string& path)
{
    {
        std::FILE* f = std::fopen(path.c_str(), "rb");
        if (!f)
            throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
        char head[16] = {};
        size_t k = std::fread(head, 1, sizeof(head), f);
        std::fclose(f);
        if (k == 16 && std::memcmp(head, "SQLite format 3\0", 16) == 0)
            return TraceFormat::NsysSqlite;
    }
    auto src = openFileSource(path);
    char buf[256];
    size_t n = 0;
    while (n < sizeof(buf)) {
        size_t k = src->read(buf + n, sizeof(buf) - n);
        if (k == 0)
            break;
        n += k;
    }
    size_t i = 0;
    while (i < n && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t'))
        ++i;
    if (i == n)
        return TraceFormat::Unknown;
    std::string_view rest(buf + i, n - i);
    if (rest.substr(0, 10) == "{\"kltrace\"")
        return TraceFormat::KlTrace;
    // A header whose keys were written in another order (sorted by a JSON library) is still a .kltrace header.
    if (std::string_view line = rest.substr(0, rest.find('\n')); rest[0] == '{'
        && line.find("\"kltrace\":") != std::string_view::npos
        && line.find("\"traceEvents\"") == std::string_view::npos)
        return TraceFormat::KlTrace;
    if (rest[0] == '{' || rest[0] == '[')
        return TraceFormat::ChromeJson;
    return TraceFormat::Unknown;
}

Trace importTraceFile(const std::string& path, const ImportOptions& opts)
{
    switch (detectFormat(path)) {
    case TraceFormat::NsysSqlite:
        return importNsysSqlite(path, opts);
    case TraceFormat::KlTrace:
        return importKlTraceFile(path, opts);
    case TraceFormat::ChromeJson:
        return importChromeJsonFile(path, opts);
    case TraceFormat::Unknown:
        break;
    }
    throw InputError(path
        + ": unknown trace format (expected Chrome/Perfetto JSON, PyTorch profiler JSON, an "
          "Nsight Systems SQLite export or a .kltrace capture; gzip is fine)");
}

} // namespace kl::prof
