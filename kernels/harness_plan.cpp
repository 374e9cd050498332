#include "kernels/harness_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace kl {

namespace {
    std::uint64_t alignUp(std::uint64_t v, std::uint64_t a)
    {
        return (v + a - 1) / a * a;
    }

    int significandBits(DType t)
    {
        switch (t) {
        case DType::F32:
            return 24;
        case DType::F16:
            return 11;
        case DType::BF16:
            return 8;
        case DType::F64:
            return 53;
        case DType::FP8E4M3:
            return 4;
        case DType::I32:
        case DType::I64:
        case DType::U8:
            break;
        }
        return 0; // integers: exact
    }
} // namespace

std::uint64_t SlabLayout::bufferOffset(int set) const
{
    return lead + static_cast<std::uint64_t>(set) * stride + gapUnits.at(static_cast<std::size_t>(set)) * kAlign + pre;
}

SlabLayout packedSlab(std::uint64_t bufferBytes, int sets)
{
    if (sets < 1 || sets > SlabLayout::kMaxSets)
        throw std::invalid_argument("slab of " + std::to_string(sets) + " sets");
    SlabLayout s;
    s.bufferBytes = bufferBytes;
    s.stride = alignUp(std::max<std::uint64_t>(bufferBytes, 4), SlabLayout::kAlign);
    s.pre = 0;
    s.gapUnits.assign(static_cast<std::size_t>(sets), 0);
    s.mappedBytes = s.stride * static_cast<std::uint64_t>(sets);
    return s;
}

SlabLayout planSlab(std::uint64_t bufferBytes, int sets, std::uint64_t granularity, std::mt19937_64& rng)
{
    if (sets < 1 || sets > SlabLayout::kMaxSets)
        throw std::invalid_argument(
            "slab of " + std::to_string(sets) + " sets (1.." + std::to_string(SlabLayout::kMaxSets) + ")");
    if (granularity == 0 || granularity % SlabLayout::kAlign)
        throw std::invalid_argument("mapping granularity " + std::to_string(granularity) + " is not a multiple of "
            + std::to_string(SlabLayout::kAlign));
    SlabLayout s;
    s.bufferBytes = bufferBytes;
    // The last set has no gap after its trailing canary; every other set's rest is the room for the next gap.
    const std::uint64_t maxGap = (SlabLayout::kMaxGapUnits - 1) * SlabLayout::kAlign;
    s.stride
        = alignUp(std::max<std::uint64_t>(bufferBytes, 4), SlabLayout::kAlign) + 2 * SlabLayout::kCanaryBytes + maxGap;
    for (int k = 0; k < sets; ++k)
        s.gapUnits.push_back(static_cast<std::uint8_t>(rng() % SlabLayout::kMaxGapUnits));
    const std::uint64_t used = static_cast<std::uint64_t>(sets) * s.stride;
    s.mappedBytes = alignUp(used, granularity);
    s.lead = s.mappedBytes - used;
    // Shift the last set so its trailing canary ends exactly at the mapping's end.
    const std::uint64_t lastEnd = s.bufferOffset(sets - 1)
        + alignUp(std::max<std::uint64_t>(bufferBytes, 4), SlabLayout::kAlign) + SlabLayout::kCanaryBytes;
    s.gapUnits.back() = static_cast<std::uint8_t>(s.gapUnits.back() + (s.mappedBytes - lastEnd) / SlabLayout::kAlign);
    return s;
}

int inputSetOfNextWrite(int q, bool graphs, std::uint64_t launchesSoFar, int inputSets, int outputSets)
{
    const std::uint64_t period = static_cast<std::uint64_t>(outputSets);
    const std::uint64_t j = graphs
        ? static_cast<std::uint64_t>(q)
        : launchesSoFar + (static_cast<std::uint64_t>(q) + period - launchesSoFar % period) % period;
    return static_cast<int>(j % static_cast<std::uint64_t>(inputSets));
}

int outputRotationPeriod(int inputSets, int launchesPerCycle)
{
    if (inputSets < 1)
        throw std::invalid_argument("outputRotationPeriod: no input sets");
    int p = std::max(inputSets + 1, launchesPerCycle);
    while (std::gcd(p, inputSets) != 1)
        ++p;
    return p;
}

Tolerance roundingFloor(DType t)
{
    const int p = significandBits(t);
    Tolerance f;
    f.relL2 = p ? std::ldexp(1.0, -p) : 0.0;
    f.maxAbs = p ? std::ldexp(1.0, -(p - 2)) : 0.0;
    return f;
}

Tolerance measuredTolerance(DType t, const Tolerance& stated, double measuredRelL2, double measuredMaxAbs)
{
    const Tolerance floor = roundingFloor(t);
    auto derive = [](double measured, double floorValue, double statedValue) {
        if (!std::isfinite(measured))
            return statedValue; // calibration failed: the stated budget is all there is
        return std::min(statedValue, std::max(kMeasuredToleranceFactor * measured, floorValue));
    };
    Tolerance out;
    out.relL2 = derive(measuredRelL2, floor.relL2, stated.relL2);
    out.maxAbs = derive(measuredMaxAbs, floor.maxAbs, stated.maxAbs);
    return out;
}

} // namespace kl
