#pragma once
// Writes a Trace as Chrome trace JSON (Perfetto / chrome://tracing open it). Categories and args follow the
// PyTorch profiler's conventions, so the export re-imports into the same model.
#include "profiler/trace.h"

#include <string>

namespace kl::prof {

std::string toChromeJson(const Trace& t);
void exportChromeJsonFile(const Trace& t, const std::string& path); // atomic write

} // namespace kl::prof
