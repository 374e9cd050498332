// libFuzzer entry point over the same targets (tests/fuzz/run-fuzz.sh builds it with clang and the sanitizers):
// the first byte picks the target, the rest is the input. A PropertyViolation escapes and is reported as a crash.
#include "tests/fuzz/fuzz_targets.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size < 1)
        return 0;
    const auto& all = kl::fuzz::targets();
    all[data[0] % all.size()].check(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
    return 0;
}
