#pragma once
#include <string>

namespace kl {

// "_Z12rmsnorm_tmplP13__nv_bfloat16..." -> "rmsnorm_tmpl(__nv_bfloat16*, ...)"; a name that is not mangled (or
// cannot be demangled) comes back as it is.
std::string demangle(const std::string& symbol);

} // namespace kl
