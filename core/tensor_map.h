#pragma once
// TMA tensor maps declared by a candidate (kernels/HARNESS.md, "Tensor maps"). A candidate has no host code, so
// it cannot call cuTensorMapEncodeTiled; it declares each map instead and the worker encodes it for the buffer it
// allocated, passing it as a `const __grid_constant__ CUtensorMap` kernel argument under the map's name:
//
//   // @kl:tensormap tmA tensor=A box=(BK, BM) swizzle=128B interleave=none l2promo=256B oob=zero
//
// box (and the optional elemstride) list dimensions innermost first, as CUDA does: for a row-major A[M,K] the
// first is along K. The rules cuTensorMapEncodeTiled imposes are checked here, before anything reaches a device,
// so that an invalid map is a verdict naming the annotation and the field, never a driver error or a fault.
#include "core/expr.h"
#include "core/problem.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kl {

enum class TmaSwizzle { None, B32, B64, B128 };
enum class TmaInterleave { None, B16, B32 };
enum class TmaL2Promotion { None, B64, B128, B256 };
enum class TmaOobFill { Zero, Nan };

struct TensorMapSpec {
    static constexpr int kMaxRank = 5;
    static constexpr std::int64_t kMaxBox = 256;
    static constexpr std::int64_t kMaxElementStride = 8;

    std::string name; // the kernel argument
    std::string tensor; // a tensor of the problem
    std::vector<Expr> box; // innermost first, one per tensor dimension
    std::vector<Expr> elementStrides; // empty: all 1
    TmaSwizzle swizzle = TmaSwizzle::None;
    TmaInterleave interleave = TmaInterleave::None;
    TmaL2Promotion l2Promotion = TmaL2Promotion::None;
    TmaOobFill oobFill = TmaOobFill::Zero;
    int line = 0;
};

// One map at one shape and parameter point: what cuTensorMapEncodeTiled takes, less the address.
struct TensorMapGeometry {
    DType dtype = DType::BF16;
    int rank = 0;
    std::uint64_t globalDim[TensorMapSpec::kMaxRank] = {};
    std::uint64_t globalStrideBytes[TensorMapSpec::kMaxRank - 1] = {}; // of dims 1..rank-1
    std::uint32_t box[TensorMapSpec::kMaxRank] = {};
    std::uint32_t elementStrides[TensorMapSpec::kMaxRank] = {};
    TmaSwizzle swizzle = TmaSwizzle::None;
    TmaInterleave interleave = TmaInterleave::None;
    TmaL2Promotion l2Promotion = TmaL2Promotion::None;
    TmaOobFill oobFill = TmaOobFill::Zero;
    std::uint64_t boxBytes() const; // what one copy of the whole box lands in shared memory
};

// The map's geometry for the tensor it names at these bindings (dims and parameters); throws InputError naming
// the annotation's line, the map and the field when cuTensorMapEncodeTiled would refuse it.
TensorMapGeometry resolveTensorMap(const TensorMapSpec& map, const Problem& problem, const Bindings& vars);

// The bytes one swizzle pattern spans (0 for none): the innermost box extent may not exceed it.
std::uint64_t swizzleSpanBytes(TmaSwizzle s);

// The address rule, which only the worker can check: 16-byte alignment, 32 with 32-byte interleave. Empty when
// the address is fine, else why not.
std::string tensorMapAddressProblem(const TensorMapSpec& map, const TensorMapGeometry& g, std::uint64_t address);

} // namespace kl
