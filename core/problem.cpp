#include "core/problem.h"

#include "core/device.h"
#include "core/errors.h"

#include <algorithm>
#include <cmath>

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
            return fail("unknown dim " + abbreviate(k));
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

const std::string& Problem::templateFor(int arch) const
{
    const std::string* chosen = &templateFile;
    for (const auto& [needs, file] : archTemplates)
        if (arch >= needs)
            chosen = &file;
    return *chosen;
}

std::optional<std::string> badProblemName(const Problem& p, const std::string& name, const char* kind)
{
    if (!Expr::isVariableName(name))
        return std::string("bad ") + kind + " name '" + abbreviate(name)
            + "': a name is letters, digits and '_', not starting with a digit, and not a function or true/false";
    const bool scalar = std::any_of(p.scalars.begin(), p.scalars.end(), [&](const auto& s) { return s.name == name; });
    if (p.dim(name))
        return std::string(kind) + " '" + name + "': a dim of that name is declared already";
    if (scalar)
        return std::string(kind) + " '" + name + "': a scalar of that name is declared already";
    if (p.tensor(name))
        return std::string(kind) + " '" + name + "': a tensor of that name is declared already";
    return std::nullopt;
}

void validateProblem(const Problem& p, const std::string& where)
{
    std::string dimNames;
    for (const auto& d : p.dims)
        dimNames += (dimNames.empty() ? "" : ", ") + d.name;
    auto requireDimsOnly = [&](const Expr& e, const std::string& field) {
        for (const auto& id : e.identifiers())
            if (!p.dim(id))
                throw InputError(field + ": '" + abbreviate(e.text()) + "' names '" + abbreviate(id)
                    + "', which is not a dim (dims: " + dimNames + ")");
    };
    for (std::size_t i = 0; i < p.tensors.size(); ++i)
        for (std::size_t k = 0; k < p.tensors[i].shape.size(); ++k)
            requireDimsOnly(
                p.tensors[i].shape[k], where + ".tensors[" + std::to_string(i) + "].shape[" + std::to_string(k) + "]");
    requireDimsOnly(p.flops, where + ".flops");
    requireDimsOnly(p.bytes, where + ".bytes");

    auto atEveryShape = [&](const std::vector<Shape>& shapes, const std::string& key) {
        for (std::size_t s = 0; s < shapes.size(); ++s) {
            const Bindings b = shapes[s].bindings();
            const std::string at = " at " + key + "[" + std::to_string(s) + "] (" + shapes[s].label() + ")";
            for (std::size_t i = 0; i < p.tensors.size(); ++i) {
                const TensorSpec& t = p.tensors[i];
                const std::string field = where + ".tensors[" + std::to_string(i) + "].shape";
                double elements = 1;
                for (std::size_t k = 0; k < t.shape.size(); ++k) {
                    std::int64_t extent = 0;
                    try {
                        extent = t.shape[k].evaluateInt(b);
                    } catch (const ExprError& e) {
                        throw InputError(field + "[" + std::to_string(k) + "]" + at + ": " + e.what());
                    }
                    if (extent < 0)
                        throw InputError(field + "[" + std::to_string(k) + "]" + at + ": '"
                            + abbreviate(t.shape[k].text()) + "' is " + std::to_string(extent) + ", a negative extent");
                    elements *= static_cast<double>(extent);
                }
                if (elements > kMaxTensorElements)
                    throw InputError(field + at + ": tensor " + t.name + " has " + std::to_string(elements)
                        + " elements, more than the limit of 2^40");
            }
            for (const auto& [formula, key2] : { std::pair { &p.flops, "flops" }, std::pair { &p.bytes, "bytes" } }) {
                double v = 0;
                try {
                    v = formula->evaluate(b);
                } catch (const ExprError& e) {
                    throw InputError(where + "." + key2 + at + ": " + e.what());
                }
                if (!std::isfinite(v) || v < 0)
                    throw InputError(where + "." + key2 + at + ": '" + abbreviate(formula->text()) + "' is "
                        + std::to_string(v) + ", not a count");
            }
        }
    };
    atEveryShape(p.tuningShapes, "tuning_shapes");
    atEveryShape(p.verifyShapes, "verify_shapes");

    for (const auto& [dtype, tol] : p.tolerances)
        for (const auto& [value, key] : { std::pair { tol.relL2, "rel_l2" }, std::pair { tol.maxAbs, "max_abs" } })
            if (!(value >= 0))
                throw InputError(where + ".tolerances." + dtypeName(dtype) + "." + key + ": must not be negative, got "
                    + std::to_string(value) + " (nothing could pass it)");
    if (!p.tuningShapes.empty()
        && std::none_of(p.tuningShapes.begin(), p.tuningShapes.end(), [](const Shape& s) { return s.weight > 0; }))
        throw InputError(where
            + ".tuning_shapes: every weight is 0; the objective (a weighted geomean over them) "
              "needs one shape with a weight above 0");
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
