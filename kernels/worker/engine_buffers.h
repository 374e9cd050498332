#pragma once
// What the engine's operations (engine*.cpp) share about buffers: tensor sizes at a shape and the candidate's
// slabs (one tensor's or workspace's buffers for every set, behind unmapped guards).
#include "core/evaluation.h"
#include "core/problem.h"
#include "kernels/worker/device_memory.h"
#include "kernels/worker/engine.h"

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kl::worker {

inline constexpr std::uint64_t kAlign = 256;
inline constexpr std::uint32_t kWorkspacePoison = 0x7FA5C3E1u;

inline std::uint64_t alignUp(std::uint64_t v, std::uint64_t a)
{
    return (v + a - 1) / a * a;
}

inline double nowSeconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct TensorSize {
    const TensorSpec* spec;
    std::uint64_t elements;
    std::uint64_t bytes;
};

// Every tensor of `p` at shape `s`, in the problem's order.
std::vector<TensorSize> tensorSizes(const Problem& p, const Shape& s);

struct CandidateSlab {
    std::string name;
    SlabLayout layout;
    CUdeviceptr base = 0;
    std::uint64_t elements = 0;
    DType dtype = DType::U8;
    TensorRole role = TensorRole::Input;
    bool workspace = false;
    bool zeroInit = false;
    CUdeviceptr buffer(int set) const { return base + layout.bufferOffset(set); }
};

// A tensor's slab of `sets` buffers, and a workspace's (an output of 32-bit words), laid out but not yet mapped.
CandidateSlab tensorSlab(const TensorSize& t, int sets, std::uint64_t granularity, std::mt19937_64& rng);
CandidateSlab workspaceSlab(const WorkspaceNeed& w, int sets, std::uint64_t granularity, std::mt19937_64& rng);

// Before a batch of timed launches, as before every verification launch: each output slab poisoned, each workspace
// slab poisoned unless its plan zeroes it, their canaries written again.
void prepareOutputSlabs(const HarnessKernels& h, CUstream s, const std::vector<CandidateSlab>& slabs);
// Enqueues the canary check of every slab: the number of changed guard words lands in the 64-bit word at slot.
void checkSlabCanaries(const HarnessKernels& h, CUstream s, const std::vector<CandidateSlab>& slabs, CUdeviceptr slot);
// The hash of every input slab, canaries included, through the 64-bit word at slot; synchronizes s.
std::uint64_t hashInputSlabs(
    const HarnessKernels& h, CUstream s, const std::vector<CandidateSlab>& slabs, CUdeviceptr slot);

// The verdicts after timing, as the time op and the pipeline op record them: per re-checked batch (slots: `stride`
// outputs' slots per check, in the order of `names`) a "timed:<batch>" check that also carries the canary and
// input-hash results; reasons `dynamic.timed-output-wrong`, `dynamic.input-modified` and `dynamic.canary` naming `who`
// ("the candidate") and `where` ("on shape T=16"). Returns whether all of it passed.
bool judgeTimedChecks(const std::uint64_t* slots, std::size_t stride, const std::vector<int>& batches,
    const std::vector<std::string>& names, const std::vector<Tolerance>& tolerances, std::uint64_t seed,
    bool inputsUnchanged, std::uint64_t canaryBad, const std::string& who, const std::string& where,
    std::vector<CorrectnessStats>& checks, std::vector<VerdictReason>& reasons);

} // namespace kl::worker
