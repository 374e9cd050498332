#pragma once
// `kloop export --format flashinfer-bench` (cli/cmd_flashinfer_bench.cpp), called by `kloop export`.
#include "cli/command.h"
#include "core/problem.h"
#include "core/session.h"

namespace kl::cli {

// Writes the Solution and Trace files and prints where; the caller handles refusals and errors.
int runFlashInferBenchExport(const Session& s, const Problem& problem, const Args& a);

} // namespace kl::cli
