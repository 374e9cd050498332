#pragma once
// The harness's own device kernels (fill, poison, compare, hash, canaries, copy), compiled with NVRTC at
// worker start. Their names start with kl_h_ so kernel records can tell them from candidates.
#include "core/problem.h"
#include "kernels/harness_kernel_source.h"
#include "kernels/harness_plan.h"
#include "kernels/nvrtc_compiler.h"

#include <cstdint>
#include <cuda.h>
#include <string>
#include <vector>

namespace kl::worker {

// Slots one check writes on the device (one 64-bit word each), read back once per shape.
enum CheckSlot : int {
    kSumSqDiff = 0, // double
    kSumSqRef, // double
    kMaxErr, // float bits: max |c - r| / max(|r|, rms(ref), 1)
    kNonFinite, // candidate NaN/Inf where the reference is finite (or class mismatch)
    kPoisonLeft, // output elements still holding the poison pattern
    kCanaryBad, // guard words changed
    kHashBefore, // inputs before the candidate ran
    kHashAfter, // and after
    kRefSumSq, // double: sum of squares of the reference output this check's reference run wrote
    kSlotCount
};

enum class Distribution { Normal = 0, Large = 1, Outliers = 2 };
const char* distributionName(Distribution d);

using kl::harnessKernelSource;

class HarnessKernels {
public:
    void load(NvrtcCompiler& compiler, const std::string& arch); // throws std::runtime_error
    void unload();
    ~HarnessKernels();

    void fill(CUstream s, CUdeviceptr p, std::uint64_t n, DType dt, Distribution dist, std::uint64_t seed, double scale,
        double largeFactor = kLargeFactor) const;
    // One input's values: an integer input with a value kind (TensorSpec::values) gets kl::intInputValues, made on
    // the host and copied in stream order; any other input gets fill().
    void fillInput(CUstream s, CUdeviceptr p, const TensorSpec& t, const Shape& shape, std::uint64_t n,
        Distribution dist, std::uint64_t seed) const;
    void poison(CUstream s, CUdeviceptr p, std::uint64_t n, DType dt, std::uint64_t pattern) const;
    // The reference's sum of squares (for the max error's floor) must be in refSumSq before compare() runs.
    void sumSquares(CUstream s, CUdeviceptr ref, std::uint64_t n, DType dt, CUdeviceptr out) const;
    void compare(CUstream s, CUdeviceptr cand, CUdeviceptr ref, std::uint64_t n, DType dt, std::uint64_t poison,
        CUdeviceptr slots, CUdeviceptr refSumSq) const;
    void hash(CUstream s, CUdeviceptr p, std::uint64_t bytes, std::uint64_t salt, CUdeviceptr slot) const;
    void copy(CUstream s, CUdeviceptr src, CUdeviceptr dst, std::uint64_t bytes16) const;

    // Slabs (kl::SlabLayout) at `base`: every word outside the buffers is a canary; buffers are poisoned or
    // filled per set, values from (seed, set) so two layouts of the same sets hold the same values.
    void slabCanaryFill(CUstream s, CUdeviceptr base, const SlabLayout& l) const;
    void slabCanaryCheck(CUstream s, CUdeviceptr base, const SlabLayout& l, CUdeviceptr slot) const;
    void slabPoison(
        CUstream s, CUdeviceptr base, const SlabLayout& l, std::uint64_t n, DType dt, std::uint64_t pattern) const;
    void slabFill(CUstream s, CUdeviceptr base, const SlabLayout& l, std::uint64_t n, DType dt, Distribution dist,
        std::uint64_t seed, double scale, double largeFactor = kLargeFactor) const;
    void slabFillInput(CUstream s, CUdeviceptr base, const SlabLayout& l, const TensorSpec& t, const Shape& shape,
        std::uint64_t n, Distribution dist, std::uint64_t seed) const;
    // count (candidate, reference) pairs of n elements, pointer lists in device memory, pooled into one slot set;
    // rmsCount elements are behind refSumSq.
    void comparePairs(CUstream s, CUdeviceptr candPtrs, CUdeviceptr refPtrs, int count, std::uint64_t n, DType dt,
        std::uint64_t poison, CUdeviceptr slots, CUdeviceptr refSumSq, std::uint64_t rmsCount) const;
    // count (source, destination) pairs of `bytes` each, pointer lists in device memory (16-byte aligned buffers).
    void copyPairs(CUstream s, CUdeviceptr srcPtrs, CUdeviceptr dstPtrs, int count, std::uint64_t bytes) const;
    void spin(CUstream s, std::uint64_t cycles) const;

    static std::uint64_t poisonPattern(DType dt, int variant);
    static constexpr std::uint32_t kCanaryWord = 0xC0FFEE5Au;
    static constexpr double kLargeFactor = 1000.0;
    // The "large" check's factor for t: kLargeFactor, or what its "large_scale" declares (TensorSpec::largeScale).
    static double largeFactorOf(const TensorSpec& t);

private:
    static std::uint64_t vectorLanes(std::uint64_t n, DType dt);
    void launch(CUfunction f, CUstream s, std::uint64_t n, void** args) const;
    CUmodule m_module = nullptr;
    CUfunction m_fill = nullptr, m_poison = nullptr, m_compare = nullptr, m_hash = nullptr, m_copy = nullptr,
               m_spin = nullptr, m_sumSquares = nullptr, m_comparePairs = nullptr, m_slabCanaryFill = nullptr,
               m_slabCanaryCheck = nullptr, m_slabPoison = nullptr, m_slabFill = nullptr, m_copyPairs = nullptr;
    void launchSlab(
        CUfunction f, CUstream s, const SlabLayout& l, std::uint64_t lanes, bool withLead, void** args) const;
    int m_smCount = 132;
};

} // namespace kl::worker
