#pragma once
// One fuzz target per parser of outside text. Each runs its parser on an input and checks what must hold for
// every input: no crash, a value or an InputError/ExprError with a bounded message, round trips where the format
// has one. A broken property throws PropertyViolation: the ctest runner (fuzz_ctest.cpp) reports it with the
// input, the libFuzzer entry point (fuzz_libfuzzer.cpp) lets it escape and so reports a crash.
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kl::fuzz {

class PropertyViolation : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

struct Target {
    const char* name;
    void (*check)(std::string_view input);
};

// expressions (core/expr), annotations (core/kernel_spec), problem.json (core/json_io + core/problem),
// LLM replies (agent/prompt/reply_parser), traces (profiler Chrome JSON importer).
const std::vector<Target>& targets();

} // namespace kl::fuzz
