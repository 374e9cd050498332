#include "core/problem.h"

#include "core/device.h"
#include "core/errors.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <unordered_set>

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

namespace {
    constexpr struct {
        TensorRole role;
        const char* name;
    } kTensorRoles[]
        = { { TensorRole::Input, "input" }, { TensorRole::Output, "output" }, { TensorRole::InOut, "inout" } };
} // namespace

const char* tensorRoleName(TensorRole r)
{
    for (const auto& t : kTensorRoles)
        if (t.role == r)
            return t.name;
    return "input";
}

std::optional<TensorRole> tensorRoleFromName(const std::string& name)
{
    for (const auto& t : kTensorRoles)
        if (name == t.name)
            return t.role;
    return std::nullopt;
}

std::size_t dtypeBytes(DType t)
{
    for (const auto& d : kDTypes)
        if (d.type == t)
            return d.bytes;
    return 4;
}

namespace {
    constexpr std::pair<IntValues::Kind, const char*> kIntKinds[] = {
        { IntValues::Kind::Any, "any" },
        { IntValues::Kind::Range, "range" },
        { IntValues::Kind::Distinct, "distinct" },
        { IntValues::Kind::Permutation, "permutation" },
        { IntValues::Kind::Lengths, "lengths" },
    };

    // splitmix64: the same stream on every machine and standard library (std:: distributions are not).
    struct SplitMix64 {
        std::uint64_t state;
        std::uint64_t next()
        {
            std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            return z ^ (z >> 31);
        }
        std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
        double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    };
} // namespace

const char* intValuesKindName(IntValues::Kind k)
{
    for (const auto& [kind, name] : kIntKinds)
        if (kind == k)
            return name;
    return "any";
}

std::optional<IntValues::Kind> intValuesKindFromName(const std::string& name)
{
    for (const auto& [kind, n] : kIntKinds)
        if (name == n)
            return kind;
    return std::nullopt;
}

double ScalarSpec::valueAt(const Bindings& dims) const
{
    return formula ? formula->evaluate(dims) : value;
}

std::vector<std::int64_t> intInputValues(const TensorSpec& t, const Shape& s, std::uint64_t count, std::uint64_t seed)
{
    const Bindings b = s.bindings();
    const IntValues& iv = t.values;
    SplitMix64 rng { seed ^ 0x5851F42D4C957F2Dull };
    std::vector<std::int64_t> v(count, -1);
    switch (iv.kind) {
    case IntValues::Kind::Any:
        throw std::invalid_argument("tensor " + t.name + " has no integer value kind");
    case IntValues::Kind::Range: {
        const std::int64_t lo = iv.low.evaluateInt(b), hi = iv.high.evaluateInt(b);
        if (hi <= lo)
            throw ExprError("tensor " + t.name + ": range [" + std::to_string(lo) + ", " + std::to_string(hi)
                + ") is empty at " + s.label());
        for (auto& x : v)
            x = lo + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(hi - lo)));
        break;
    }
    case IntValues::Kind::Lengths: {
        const std::int64_t lo = iv.low.evaluateInt(b), hi = iv.high.evaluateInt(b);
        if (hi < lo)
            throw ExprError("tensor " + t.name + ": lengths [" + std::to_string(lo) + ", " + std::to_string(hi)
                + "] are empty at " + s.label());
        for (auto& x : v)
            x = lo + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(hi - lo) + 1));
        if (count >= 1) {
            const std::uint64_t longest = rng.below(count);
            v[longest] = hi;
            if (count >= 2)
                v[(longest + 1 + rng.below(count - 1)) % count] = lo;
        }
        break;
    }
    case IntValues::Kind::Permutation:
        std::iota(v.begin(), v.end(), std::int64_t { 0 });
        for (std::uint64_t i = count; i > 1; --i)
            std::swap(v[i - 1], v[rng.below(i)]);
        break;
    case IntValues::Kind::Distinct: {
        const std::int64_t n = iv.high.evaluateInt(b);
        std::uint64_t rowLength = count;
        if (!t.shape.empty()) {
            const std::int64_t last = t.shape.back().evaluateInt(b);
            rowLength = last > 0 ? static_cast<std::uint64_t>(last) : count;
        }
        if (rowLength == 0)
            break;
        std::unordered_set<std::int64_t> chosen;
        std::vector<std::int64_t> row;
        for (std::uint64_t start = 0; start + rowLength <= count; start += rowLength) {
            std::uint64_t valid
                = std::min<std::uint64_t>(rowLength, static_cast<std::uint64_t>(std::max<std::int64_t>(n, 0)));
            if (valid > 0 && iv.padFraction > 0 && rng.unit() < iv.padFraction)
                valid = rng.below(valid);
            // Floyd's sampling of `valid` distinct values from [0, n), then shuffled.
            chosen.clear();
            row.clear();
            for (std::int64_t j = n - static_cast<std::int64_t>(valid); j < n; ++j) {
                const auto pick = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(j) + 1));
                row.push_back(chosen.insert(pick).second ? pick : (chosen.insert(j), j));
            }
            for (std::size_t i = row.size(); i > 1; --i)
                std::swap(row[i - 1], row[rng.below(i)]);
            std::copy(row.begin(), row.end(), v.begin() + static_cast<std::ptrdiff_t>(start));
        }
        break;
    }
    }
    return v;
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

std::string TraceMatchRule::describe() const
{
    std::string s = module.empty() ? "op " + op : "module *" + module;
    if (!then.empty())
        s += " (+ " + then + ")";
    return s;
}

bool isTraceInputVariable(const std::string& name)
{
    // in<input>_<axis|rank|rows|last>
    if (name.size() < 5 || name.compare(0, 2, "in") != 0)
        return false;
    std::size_t i = 2;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])))
        ++i;
    if (i == 2 || i > 4 || i + 1 >= name.size() || name[i] != '_')
        return false;
    const std::string what = name.substr(i + 1);
    if (what == "rank" || what == "rows" || what == "last")
        return true;
    return what.size() == 1 && what[0] >= '0' && what[0] <= '7';
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

const ScalarSpec* Problem::scalar(const std::string& n) const
{
    for (const auto& sc : scalars)
        if (sc.name == n)
            return &sc;
    return nullptr;
}

Shape Problem::withConstants(Shape s) const
{
    for (const auto& d : dims)
        if (d.constant)
            s.dims.emplace(d.name, d.min);
    return s;
}

std::vector<std::size_t> Problem::regimesOf(const Shape& s) const
{
    std::vector<std::size_t> in;
    const Bindings b = s.bindings();
    for (std::size_t i = 0; i < regimes.size(); ++i)
        if (regimes[i].condition.evaluateBool(b)) // one set of bindings for every regime
            in.push_back(i);
    return in;
}

bool isRegimeName(const std::string& name)
{
    return !name.empty() && name.size() <= 32 && name[0] >= 'a' && name[0] <= 'z'
        && std::all_of(name.begin(), name.end(),
            [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

std::string regimePartitionError(const Problem& p, const std::vector<Shape>& shapes, const std::string& what)
{
    if (p.regimes.empty())
        return {};
    std::string names;
    for (const Regime& r : p.regimes)
        names += (names.empty() ? "" : ", ") + r.name;
    for (const Shape& s : shapes) {
        std::vector<std::size_t> in;
        try {
            in = p.regimesOf(s);
        } catch (const ExprError& e) {
            return what + " " + s.label() + ": " + e.what();
        }
        if (in.empty())
            return what + " " + s.label() + " is in no regime (a gap; regimes: " + names + ")";
        if (in.size() > 1) {
            std::string both;
            for (std::size_t i : in)
                both += (both.empty() ? "" : " and ") + p.regimes[i].name;
            return what + " " + s.label() + " is in " + both + " (regimes overlap)";
        }
    }
    return {};
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
    for (std::size_t i = 0; i < p.scalars.size(); ++i)
        if (p.scalars[i].formula)
            requireDimsOnly(*p.scalars[i].formula, where + ".scalars[" + std::to_string(i) + "].value");
    for (std::size_t i = 0; i < p.tensors.size(); ++i) {
        const TensorSpec& t = p.tensors[i];
        if (t.values.kind == IntValues::Kind::Any)
            continue;
        const std::string field = where + ".tensors[" + std::to_string(i) + "].values";
        if (t.dtype != DType::I32 && t.dtype != DType::I64)
            throw InputError(field + ": tensor " + t.name + " is " + dtypeName(t.dtype) + "; value kinds ("
                + intValuesKindName(t.values.kind) + ") are for i32 and i64 inputs");
        if (!readsInput(t.role))
            throw InputError(field + ": tensor " + t.name + " is an output; value kinds describe inputs");
        if (!(t.values.padFraction >= 0 && t.values.padFraction <= 1))
            throw InputError(field + ".pad_fraction: must be in [0, 1], got " + std::to_string(t.values.padFraction));
        requireDimsOnly(t.values.low, field + ".low");
        requireDimsOnly(t.values.high, field + ".high");
    }

    for (std::size_t r = 0; r < p.traceMatch.size(); ++r) {
        const TraceMatchRule& rule = p.traceMatch[r];
        const std::string field = where + ".trace_match[" + std::to_string(r) + "]";
        if (rule.module.empty() == rule.op.empty())
            throw InputError(field + ": name exactly one of \"module\" (an nn.Module class suffix) or \"op\"");
        auto inputsOnly = [&](const Expr& e, const std::string& key) {
            for (const auto& id : e.identifiers())
                if (!isTraceInputVariable(id))
                    throw InputError(field + "." + key + ": '" + abbreviate(e.text()) + "' names '" + abbreviate(id)
                        + "'; trace-match expressions name input sizes: in0_0 .. in0_7, in0_rank, in0_rows, in0_last");
        };
        if (rule.when)
            inputsOnly(*rule.when, "when");
        for (const auto& [dim, e] : rule.dims) {
            if (!p.dim(dim))
                throw InputError(field + ".dims." + abbreviate(dim) + ": not a dim (dims: " + dimNames + ")");
            inputsOnly(e, "dims." + dim);
        }
        for (const auto& d : p.dims)
            if (!d.constant && !rule.dims.count(d.name))
                throw InputError(field + ".dims: no expression for dim " + d.name
                    + " (a shape from the trace needs every dim that is not a constant)");
    }

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
            for (std::size_t i = 0; i < p.tensors.size(); ++i) {
                const TensorSpec& t = p.tensors[i];
                const IntValues& iv = t.values;
                if (iv.kind == IntValues::Kind::Any || iv.kind == IntValues::Kind::Permutation)
                    continue;
                const std::string field = where + ".tensors[" + std::to_string(i) + "].values";
                std::int64_t lo = 0, hi = 0;
                try {
                    lo = iv.low.evaluateInt(b);
                    hi = iv.high.evaluateInt(b);
                } catch (const ExprError& e) {
                    throw InputError(field + at + ": " + e.what());
                }
                const bool empty = iv.kind == IntValues::Kind::Range ? hi <= lo
                    : iv.kind == IntValues::Kind::Lengths            ? hi < lo
                                                                     : hi < 1;
                if (empty)
                    throw InputError(field + at + ": " + intValuesKindName(iv.kind) + " low " + std::to_string(lo)
                        + ", high " + std::to_string(hi) + " leave no value to draw");
                const std::int64_t limit = t.dtype == DType::I32 ? std::numeric_limits<std::int32_t>::max()
                                                                 : std::numeric_limits<std::int64_t>::max();
                if (hi > limit || lo < -limit)
                    throw InputError(
                        field + at + ": values up to " + std::to_string(hi) + " do not fit " + dtypeName(t.dtype));
            }
            for (std::size_t i = 0; i < p.scalars.size(); ++i) {
                if (!p.scalars[i].formula)
                    continue;
                double v = 0;
                try {
                    v = p.scalars[i].valueAt(b);
                } catch (const ExprError& e) {
                    throw InputError(where + ".scalars[" + std::to_string(i) + "].value" + at + ": " + e.what());
                }
                if (!std::isfinite(v))
                    throw InputError(where + ".scalars[" + std::to_string(i) + "].value" + at + ": '"
                        + abbreviate(p.scalars[i].formula->text()) + "' is not finite");
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

    for (std::size_t i = 0; i < p.regimes.size(); ++i) {
        const Regime& r = p.regimes[i];
        const std::string field = where + ".regimes[" + std::to_string(i) + "]";
        if (!isRegimeName(r.name))
            throw InputError(field + ".name: '" + abbreviate(r.name)
                + "' is not a name like \"decode\" (lower-case letters, digits and _, at most 32)");
        for (std::size_t k = 0; k < i; ++k)
            if (p.regimes[k].name == r.name)
                throw InputError(field + ".name: regime '" + r.name + "' is declared twice");
        requireDimsOnly(r.condition, field + ".when");
    }
    for (const auto& [shapes, key] :
        { std::pair { &p.tuningShapes, "tuning shape" }, std::pair { &p.verifyShapes, "verify shape" } })
        if (const std::string gap = regimePartitionError(p, *shapes, key); !gap.empty())
            throw InputError(where + ".regimes: " + gap);
    // A regime may hold no tuning shape: a session tuned at a model's decode shapes only (from a trace, --shapes)
    // still carries the problem's regimes, and the one nothing times keeps the fallback.

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
