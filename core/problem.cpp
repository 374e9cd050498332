#include "core/problem.h"

#include "core/device.h"

namespace kl {

namespace {
    struct DTypeInfo {
        DType type;
        const char* name;
        std::size_t bytes;
    };
    constexpr DTypeInfo kDTypes[] = {
        { DType::F32, "f32", 4 },
        { DType::F16, "f16", 2 },
        { DType::BF16, "bf16", 2 },
        { DType::F64, "f64", 8 },
        { DType::I32, "i32", 4 },
        { DType::I64, "i64", 8 },
        { DType::U8, "u8", 1 },
        { DType::FP8E4M3, "fp8e4m3", 1 },
    };
} // namespace

const char* dtypeName(DType t)
{
    for (const auto& d : kDTypes)
        if (d.type == t)
            return d.name;
    return "f32";
}

std::optional<DType> dtypeFromName(const std::string& name)
{
    for (const auto& d : kDTypes)
        if (name == d.name)
            return d.type;
    if (name == "float32" || name == "float")
        return DType::F32;
    if (name == "float16" || name == "half")
        return DType::F16;
    if (name == "bfloat16")
        return DType::BF16;
    return std::nullopt;
}

std::size_t dtypeBytes(DType t)
{
    for (const auto& d : kDTypes)
        if (d.type == t)
            return d.bytes;
    return 4;
}

std::string Shape::label() const
{
    std::string s;
    for (const auto& [k, v] : dims) {
        if (!s.empty())
            s += ',';
        s += k + "=" + std::to_string(v);
    }
    return s;
}

Bindings Shape::bindings() const
{
    Bindings b;
    for (const auto& [k, v] : dims)
        b[k] = static_cast<double>(v);
    return b;
}

const TensorSpec* Problem::tensor(const std::string& n) const
{
    for (const auto& t : tensors)
        if (t.name == n)
            return &t;
    return nullptr;
}

const DimSpec* Problem::dim(const std::string& n) const
{
    for (const auto& d : dims)
        if (d.name == n)
            return &d;
    return nullptr;
}

bool Problem::shapeIsValid(const Shape& s, std::string* why) const
{
    auto fail = [&](const std::string& w) {
        if (why)
            *why = w;
        return false;
    };
    for (const auto& d : dims) {
        const auto it = s.dims.find(d.name);
        if (it == s.dims.end())
            return fail("shape lacks dim " + d.name);
        if (it->second < d.min || it->second > d.max)
            return fail(d.name + "=" + std::to_string(it->second) + " is outside [" + std::to_string(d.min) + ", "
                + std::to_string(d.max) + "]");
        if (d.multipleOf > 1 && it->second % d.multipleOf != 0)
            return fail(
                d.name + "=" + std::to_string(it->second) + " is not a multiple of " + std::to_string(d.multipleOf));
    }
    for (const auto& [k, v] : s.dims)
        if (!dim(k))
            return fail("unknown dim " + k);
    const Bindings b = s.bindings();
    for (const auto& c : dimConstraints) {
        try {
            if (!c.evaluateBool(b))
                return fail("constraint '" + c.text() + "' does not hold");
        } catch (const ExprError& e) {
            return fail(e.what());
        }
    }
    return true;
}

std::string Problem::archRefusal(int arch) const
{
    if (supportsArch(arch))
        return "";
    return "problem '" + name + "' supports " + archName(minArch)
        + " and newer (problem.json \"min_arch\"); this device is " + archName(arch);
}

Tolerance Problem::toleranceFor(DType t) const
{
    const auto it = tolerances.find(t);
    if (it != tolerances.end())
        return it->second;
    switch (t) {
    case DType::F32:
        return { 1e-5, 1e-4 };
    case DType::F64:
        return { 1e-12, 1e-10 };
    case DType::F16:
        return { 2e-3, 1e-2 };
    case DType::BF16:
        return { 1e-2, 5e-2 };
    default:
        return { 0, 0 };
    }
}

} // namespace kl
