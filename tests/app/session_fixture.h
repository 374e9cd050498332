#pragma once
// Writes real sessions through kl::SessionStore for the GUI tests: a reference root, tuner children,
// an LLM proposal pending review, rejected and crashed candidates, and a referee flag.
#include "core/session_store.h"

#include <filesystem>
#include <string>

namespace kl::test {

struct FixtureOptions {
    int tunerChildren = 6; // accepted / rejected alternate
    bool pendingLlm = true;
    bool refereeFlag = true;
};

// Returns the session id. Candidate ids: c0001 root, then c0002.. in order.
std::string writeSession(const std::filesystem::path& dir, const FixtureOptions& options = {});

// A copy of a session whose journal events are spaced stepMs apart (replay timing tests).
void copyWithTiming(const std::filesystem::path& from, const std::filesystem::path& to, std::int64_t stepMs);

std::string kernelSource(int block, int vec, bool fastMath);

// A PyTorch-profiler (Kineto) style Chrome trace: NVTX steps and launches on a CPU thread, kernels and copies
// on two GPU streams.
void writeChromeTrace(const std::filesystem::path& file, int steps);

} // namespace kl::test
