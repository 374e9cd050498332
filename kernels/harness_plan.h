#pragma once
// What the harness decides on the CPU before it touches the GPU (kernels/HARNESS.md, "Isolation"): where each
// candidate buffer sits inside its guarded slab, how output buffers rotate against input sets, and how tight an
// output's tolerance is given what an honest fp32 implementation achieves. No CUDA: unit-tested in CI.
#include "core/problem.h"

#include <cstdint>
#include <random>
#include <vector>

namespace kl {

// One tensor's buffers for `sets` runs, laid out in one mapping that is followed by unmapped address space:
//   [lead | set 0 stride | set 1 stride | ...]   with each stride   [gap | canary | buffer | canary | rest]
// Everything but the buffers holds canary words. The lead absorbs the mapping granularity, so the last
// buffer's trailing canary ends at the mapping's end and an overflow past it faults.
struct SlabLayout {
    static constexpr std::uint64_t kCanaryBytes = 4096;
    static constexpr std::uint64_t kAlign = 256;
    static constexpr int kMaxGapUnits = 64; // gap = units x kAlign, < 16 KiB
    static constexpr int kMaxSets = 2048; // the gap units travel as one byte per set in a kernel parameter

    std::uint64_t bufferBytes = 0;
    std::uint64_t stride = 0; // bytes per set
    std::uint64_t lead = 0; // canary bytes before set 0
    std::uint64_t mappedBytes = 0; // lead + sets x stride, a multiple of the granularity
    std::uint64_t pre = kCanaryBytes; // canary bytes between a set's gap and its buffer
    std::vector<std::uint8_t> gapUnits; // per set

    int sets() const { return static_cast<int>(gapUnits.size()); }
    std::uint64_t bufferOffset(int set) const; // from the mapping's start
};

// The harness's own arrays of per-set buffers (no canaries, no gaps): set k at k x alignUp(bufferBytes, kAlign).
SlabLayout packedSlab(std::uint64_t bufferBytes, int sets);
// Throws std::invalid_argument for sets outside [1, kMaxSets] or a granularity that is not a multiple of kAlign.
SlabLayout planSlab(std::uint64_t bufferBytes, int sets, std::uint64_t granularity, std::mt19937_64& rng);

// The number of output buffers the timed loop cycles through: at least launchesPerCycle (every output is written
// at most once between two re-poisonings) and more than inputSets, and coprime with inputSets, so an output
// buffer meets a different input set on every visit and a stale output is wrong for its new inputs.
int outputRotationPeriod(int inputSets, int launchesPerCycle);

// The input set that output buffer q (of outputSets) meets in the next timed batch, whose launches each write a
// different buffer: launched one by one from launch number `launchesSoFar` on, launch j reads input set j mod
// inputSets and writes buffer j mod outputSets; in a graph (`graphs`), buffer q is always written by launch q. The
// harness restores an in-place tensor's buffer q from that set's pristine copy before the batch.
int inputSetOfNextWrite(int q, bool graphs, std::uint64_t launchesSoFar, int inputSets, int outputSets);

// Tolerance of one output from what an honest fp32 implementation achieves: the problem's reference built
// with fp32 accumulation, measured against its fp64 build (both rounded to the output dtype) on calibration
// inputs. tolerance = max(kMeasuredToleranceFactor x measured, the dtype's rounding floor), never looser than
// the problem's stated tolerance.
constexpr double kMeasuredToleranceFactor = 8.0;
Tolerance roundingFloor(DType t); // relL2 2^-p, maxAbs 2^-(p-2), p the significand bits
Tolerance measuredTolerance(DType t, const Tolerance& stated, double measuredRelL2, double measuredMaxAbs);

} // namespace kl
