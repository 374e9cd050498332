// The libFuzzer corpus (tests/profiler/fuzz-corpus) replayed as regression tests: each input must import or be
// rejected with kl::InputError; anything else (another exception, a crash under the sanitizer build) fails.
#include "core/errors.h"
#include "profiler/importers.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

using namespace kl::prof;

TEST(FuzzCorpus, EveryInputImportsOrFailsCleanly)
{
    namespace fs = std::filesystem;
    fs::path root = fs::path(KL_SOURCE_DIR) / "tests/profiler/fuzz-corpus";
    size_t files = 0, imported = 0, rejected = 0;
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
        if (!entry.is_regular_file())
            continue;
        std::ifstream in(entry.path(), std::ios::binary);
        std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (data.empty())
            continue;
        ++files;
        std::string_view body(data.data() + 1, data.size() - 1);
        try {
            // Same dispatch as tests/profiler/fuzz/fuzz_importers.cpp.
            switch (static_cast<uint8_t>(data[0]) % 3) {
            case 0: {
                MemorySource src(body);
                Trace t = importChromeJson(src, entry.path().filename().string());
                (void)t.drawItems(0, 0, 0, t.endNs(), 1000);
                break;
            }
            case 1: {
                MemorySource src(body);
                importKlTrace(src, entry.path().filename().string());
                break;
            }
            default: {
                auto src = openGzipMemorySource(body);
                importChromeJson(*src, entry.path().filename().string());
            }
            }
            ++imported;
        } catch (const kl::InputError& e) {
            EXPECT_GT(std::string(e.what()).size(), 10u); // a message, not an empty error
            ++rejected;
        }
    }
    EXPECT_GT(files, 5u);
    EXPECT_GT(imported, 0u);
    RecordProperty("files", static_cast<int>(files));
    RecordProperty("rejected", static_cast<int>(rejected));
}
