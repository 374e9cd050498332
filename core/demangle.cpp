#include "core/demangle.h"

#include <cstdlib>
#include <cxxabi.h>

namespace kl {

std::string demangle(const std::string& symbol)
{
    int status = 0;
    char* text = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
    std::string out = status == 0 && text ? std::string(text) : symbol;
    std::free(text);
    return out;
}

} // namespace kl
