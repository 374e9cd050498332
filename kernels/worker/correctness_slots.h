#pragma once
// The correctness slots the harness's compare kernels fill (kSlotCount 64-bit words per output and check,
// harness_kernels.h), decoded and judged output by output against each output's tolerance.
#include "core/evaluation.h"
#include "core/problem.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kl::worker {

// What the compare kernel accumulated for one output.
struct OutputError {
    double relL2 = 0;
    double maxAbs = 0;
    bool nonFinite = false;
    std::uint64_t poisonLeft = 0;
};

OutputError readOutputError(const std::uint64_t* slot);

// One check judged output by output: the CorrectnessStats carries the worst output (by error over tolerance) and
// passes only when every output does; the failures name the output.
struct OutputJudgement {
    CorrectnessStats stats;
    std::string worstOutput;
    std::vector<std::pair<std::string, std::string>> failures; // (rule, detail), first per rule
};

// `slots`: the check's slots, output after output in the order of `names`.
OutputJudgement judgeCheck(
    const std::uint64_t* slots, const std::vector<std::string>& names, const std::vector<Tolerance>& tolerances);

VerdictReason reason(const std::string& rule, const std::string& msg, bool blocking = true);
// Keeps the first reason per rule: it carries the message; per-shape numbers are in the shape results.
void addReason(std::vector<VerdictReason>& out, VerdictReason r);

} // namespace kl::worker
