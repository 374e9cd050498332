#include "core/tensor_map.h"

#include "core/errors.h"

namespace kl {

namespace {

    bool isFloat(DType t)
    {
        return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
    }

} // namespace

std::uint64_t swizzleSpanBytes(TmaSwizzle s)
{
    switch (s) {
    case TmaSwizzle::None:
        return 0;
    case TmaSwizzle::B32:
        return 32;
    case TmaSwizzle::B64:
        return 64;
    case TmaSwizzle::B128:
        return 128;
    }
    return 0;
}

std::uint64_t TensorMapGeometry::boxBytes() const
{
    std::uint64_t n = dtypeBytes(dtype);
    for (int d = 0; d < rank; ++d)
        n *= box[d];
    return n;
}

TensorMapGeometry resolveTensorMap(const TensorMapSpec& map, const Problem& problem, const Bindings& vars)
{
    const std::string where = "line " + std::to_string(map.line) + ": @kl:tensormap " + map.name + " ";
    auto fail = [&](const std::string& field, const std::string& why) { throw InputError(where + field + ": " + why); };
    const TensorSpec* t = problem.tensor(map.tensor);
    if (!t)
        fail("tensor", "'" + abbreviate(map.tensor) + "' is not a tensor of " + problem.name);
    TensorMapGeometry g;
    g.dtype = t->dtype;
    g.rank = static_cast<int>(t->shape.size());
    g.swizzle = map.swizzle;
    g.interleave = map.interleave;
    g.l2Promotion = map.l2Promotion;
    g.oobFill = map.oobFill;
    if (g.rank < 1 || g.rank > TensorMapSpec::kMaxRank)
        fail("tensor", map.tensor + " has rank " + std::to_string(g.rank) + "; a tensor map takes 1 to 5");
    if (map.interleave != TmaInterleave::None && g.rank < 3)
        fail("interleave", "an interleaved map needs rank 3 or more; " + map.tensor + " has " + std::to_string(g.rank));
    if (static_cast<int>(map.box.size()) != g.rank)
        fail("box",
            "has " + std::to_string(map.box.size()) + " extents, but " + map.tensor + " has rank "
                + std::to_string(g.rank) + " (innermost first)");
    if (!map.elementStrides.empty() && static_cast<int>(map.elementStrides.size()) != g.rank)
        fail("elemstride",
            "has " + std::to_string(map.elementStrides.size()) + " entries, but " + map.tensor + " has rank "
                + std::to_string(g.rank));
    if (map.oobFill == TmaOobFill::Nan && !isFloat(t->dtype))
        fail(
            "oob", std::string("nan fill needs a floating-point tensor; ") + map.tensor + " is " + dtypeName(t->dtype));
    auto value = [&](const Expr& e, const std::string& field) -> std::int64_t {
        try {
            return e.evaluateInt(vars);
        } catch (const ExprError& ex) {
            fail(field, "'" + abbreviate(e.text()) + "': " + ex.what());
        }
        return 0;
    };
    const std::uint64_t elem = dtypeBytes(t->dtype);
    const std::uint64_t strideAlign = map.interleave == TmaInterleave::B32 ? 32 : 16;
    std::uint64_t stride = elem;
    for (int d = 0; d < g.rank; ++d) {
        // Dimension d counts from the innermost: shape index rank-1-d of the row-major tensor.
        const Expr& extent = t->shape[static_cast<std::size_t>(g.rank - 1 - d)];
        const std::int64_t dim = value(extent, "tensor");
        if (dim < 1 || dim > (std::int64_t { 1 } << 32))
            fail("tensor",
                map.tensor + " dimension " + std::to_string(d) + " (innermost first) is " + std::to_string(dim)
                    + "; a tensor map takes 1 to 2^32");
        g.globalDim[d] = static_cast<std::uint64_t>(dim);
        if (d > 0) {
            if (stride % strideAlign != 0 || stride >= (std::uint64_t { 1 } << 40))
                fail("tensor",
                    map.tensor + " dimension " + std::to_string(d) + " has a stride of " + std::to_string(stride)
                        + " bytes; a tensor map needs a multiple of " + std::to_string(strideAlign) + " below 2^40");
            g.globalStrideBytes[d - 1] = stride;
        }
        stride *= static_cast<std::uint64_t>(dim);
        const std::string boxField = "box[" + std::to_string(d) + "]";
        const std::int64_t b = value(map.box[static_cast<std::size_t>(d)], boxField);
        if (b < 1 || b > TensorMapSpec::kMaxBox)
            fail(boxField,
                "'" + abbreviate(map.box[static_cast<std::size_t>(d)].text()) + "' is " + std::to_string(b)
                    + "; a box extent is 1 to 256");
        g.box[d] = static_cast<std::uint32_t>(b);
        std::int64_t es = 1;
        if (!map.elementStrides.empty()) {
            const std::string esField = "elemstride[" + std::to_string(d) + "]";
            es = value(map.elementStrides[static_cast<std::size_t>(d)], esField);
            if (es < 1 || es > TensorMapSpec::kMaxElementStride)
                fail(esField, "is " + std::to_string(es) + "; an element stride is 1 to 8");
        }
        g.elementStrides[d] = static_cast<std::uint32_t>(es);
    }
    const std::uint64_t innerBytes = g.box[0] * elem;
    if (map.interleave == TmaInterleave::None) {
        if (innerBytes % 16 != 0)
            fail("box[0]",
                std::to_string(g.box[0]) + " elements of " + std::to_string(elem) + " bytes are "
                    + std::to_string(innerBytes) + " bytes; the innermost box extent must be a multiple of 16 bytes");
        if (const std::uint64_t span = swizzleSpanBytes(map.swizzle); span && innerBytes > span)
            fail("swizzle",
                "the innermost box extent is " + std::to_string(innerBytes) + " bytes, wider than the "
                    + std::to_string(span) + "-byte swizzle span");
    } else if (map.interleave == TmaInterleave::B32 && map.swizzle != TmaSwizzle::B32) {
        fail("swizzle", "32-byte interleave needs swizzle=32B");
    }
    return g;
}

std::string tensorMapAddressProblem(const TensorMapSpec& map, const TensorMapGeometry& g, std::uint64_t address)
{
    const std::uint64_t align = g.interleave == TmaInterleave::B32 ? 32 : 16;
    if (address % align == 0)
        return {};
    return "line " + std::to_string(map.line) + ": @kl:tensormap " + map.name + " tensor: " + map.tensor
        + "'s address is not " + std::to_string(align) + "-byte aligned";
}

} // namespace kl
