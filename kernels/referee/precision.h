#pragma once
// Which number formats a problem allows, shared by the source rules and the PTX rules: a format is allowed
// where one of the problem's tensors has it (its loads, stores and conversions), tf32 only with the tag
// allow-tf32, 16-bit floating-point arithmetic only with the tag allow-half-math, fp4/fp6 never.
#include "core/problem.h"

namespace kl::referee {

enum class PrecisionFamily { None, F16, BF16, FP8, FP4_6, TF32, INT8 };

inline constexpr const char* kAllowHalfMathTag = "allow-half-math";
inline constexpr const char* kAllowTf32Tag = "allow-tf32";

bool problemHasTag(const Problem& problem, const char* tag);
bool precisionFamilyAllowed(PrecisionFamily family, const Problem& problem);
const char* precisionFamilyName(PrecisionFamily family);
// The problem's tensor dtypes, "bf16, f32" ("none" when it has no tensor).
std::string problemDtypeList(const Problem& problem);

} // namespace kl::referee
