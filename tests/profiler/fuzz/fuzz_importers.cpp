// libFuzzer target for the JSON importers. The first byte picks the importer (and gzip), the rest is the input.
// Any outcome other than a Trace or kl::InputError (a crash, a hang, another exception, a sanitizer report) is a bug.
#include "core/errors.h"
#include "profiler/importers.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size < 1)
        return 0;
    std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
    const uint8_t mode = data[0] % 3;
    try {
        if (mode == 0) {
            kl::prof::MemorySource src(body);
            kl::prof::Trace t = kl::prof::importChromeJson(src, "fuzz");
            (void)t.drawItems(0, 0, 0, t.endNs(), 1000);
        } else if (mode == 1) {
            kl::prof::MemorySource src(body);
            kl::prof::importKlTrace(src, "fuzz");
        } else {
            auto src = kl::prof::openGzipMemorySource(body);
            kl::prof::importChromeJson(*src, "fuzz");
        }
    } catch (const kl::InputError&) {
    }
    return 0;
}
