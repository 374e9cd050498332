#include "kernels/referee/precision.h"

#include <algorithm>
#include <set>

namespace kl::referee {

bool problemHasTag(const Problem& problem, const char* tag)
{
    return std::find(problem.tags.begin(), problem.tags.end(), tag) != problem.tags.end();
}

bool precisionFamilyAllowed(PrecisionFamily family, const Problem& problem)
{
    const auto hasDtype = [&](DType d) {
        return std::any_of(
            problem.tensors.begin(), problem.tensors.end(), [&](const TensorSpec& t) { return t.dtype == d; });
    };
    switch (family) {
    case PrecisionFamily::None:
        return true;
    case PrecisionFamily::F16:
        return hasDtype(DType::F16);
    case PrecisionFamily::BF16:
        return hasDtype(DType::BF16);
    case PrecisionFamily::FP8:
        return hasDtype(DType::FP8E4M3);
    case PrecisionFamily::INT8:
        return hasDtype(DType::U8);
    case PrecisionFamily::FP4_6:
        return false;
    case PrecisionFamily::TF32:
        return problemHasTag(problem, kAllowTf32Tag);
    }
    return true;
}

const char* precisionFamilyName(PrecisionFamily family)
{
    switch (family) {
    case PrecisionFamily::F16:
        return "fp16";
    case PrecisionFamily::BF16:
        return "bf16";
    case PrecisionFamily::FP8:
        return "fp8";
    case PrecisionFamily::FP4_6:
        return "fp4/fp6";
    case PrecisionFamily::TF32:
        return "tf32";
    case PrecisionFamily::INT8:
        return "int8";
    case PrecisionFamily::None:
        break;
    }
    return "";
}

std::string problemDtypeList(const Problem& problem)
{
    std::set<DType> dtypes;
    for (const TensorSpec& t : problem.tensors)
        dtypes.insert(t.dtype);
    std::string s;
    for (DType d : dtypes)
        s += std::string(s.empty() ? "" : ", ") + dtypeName(d);
    return s.empty() ? "none" : s;
}

} // namespace kl::referee
