#pragma once
// Trace importers. All of them stream, report progress, honour cancellation and turn malformed input into a
// kl::InputError naming the file and position; none of them may crash or hang on hostile input.
#include "core/cancel.h"
#include "profiler/json_reader.h"
#include "profiler/trace.h"

#include <stdexcept>
#include <string>

namespace kl::prof {

class ImportCancelled : public std::runtime_error {
public:
    ImportCancelled()
        : std::runtime_error("import cancelled")
    {
    }
};

struct ImportOptions {
    CancelToken cancel;
    ProgressFn progress; // may be empty
};

enum class TraceFormat { ChromeJson, NsysSqlite, KlTrace, Unknown };

// Sniffs the format from the content (gzip is looked through).
TraceFormat detectFormat(const std::string& path);
Trace importTraceFile(const std::string& path, const ImportOptions& opts = {});

// Chrome / Perfetto JSON trace (object or array form), including PyTorch profiler (Kineto) traces.
Trace importChromeJson(ByteSource& src, const std::string& what, const ImportOptions& opts = {});
Trace importChromeJsonFile(const std::string& path, const ImportOptions& opts = {});

// KernelLoop's own capture format (.kltrace): JSON lines written by the CUPTI injection library.
Trace importKlTrace(ByteSource& src, const std::string& what, const ImportOptions& opts = {});
Trace importKlTraceFile(const std::string& path, const ImportOptions& opts = {});

// Nsight Systems SQLite export (nsys export --type sqlite). Throws InputError when built without SQLite.
Trace importNsysSqlite(const std::string& path, const ImportOptions& opts = {});
bool haveSqliteImport();

} // namespace kl::prof
