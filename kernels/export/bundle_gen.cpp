#include "kernels/export/bundle_gen.h"

#include "core/errors.h"
#include "kernels/export/c_expr.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace kl::exporter::detail {

namespace {

    std::string fmtDouble(double v)
    {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        return buf;
    }

    std::string cString(const std::string& s)
    {
        std::string out = "\"";
        for (char c : s) {
            if (c == '"' || c == '\\')
                out += '\\';
            if (c == '\n') {
                out += "\\n";
                continue;
            }
            out += c;
        }
        return out + "\"";
    }

    const std::set<std::string>& reservedNames()
    {
        static const std::set<std::string> names = { "dims", "workspace", "workspace_bytes", "stream", "auto", "break",
            "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern", "float", "for",
            "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed", "sizeof",
            "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "class", "new",
            "delete", "this", "template", "namespace", "operator", "private", "public", "bool", "true", "false", "out",
            "self", "torch" };
        return names;
    }

    std::string dimVar(const std::string& d)
    {
        return "kl_d_" + cIdent(d);
    }

    // Expression identifiers inside generated host code: dims as locals, parameters as their baked value, and in
    // a launcher (onDevice) SM_COUNT as the device's multiprocessor count read at run time.
    IdentifierMap identMap(const Problem& p, const ParamValues* params, const std::string& what, bool onDevice = false)
    {
        return [&p, params, what, onDevice](const std::string& name) -> std::string {
            if (p.dim(name))
                return dimVar(name);
            if (params) {
                const auto it = params->find(name);
                if (it != params->end())
                    return std::to_string(it->second) + ".0";
            }
            if (onDevice && name == kSmCountIdentifier)
                return "kl_sm_count";
            throw InputError(what + ": '" + name + "' is neither a dim of problem '" + p.name + "' nor a parameter");
        };
    }

    bool boundBy(const std::string& expr, const Problem& p, const ParamValues* params)
    {
        for (const auto& id : expressionIdentifiers(expr))
            if (!p.dim(id) && !(params && params->count(id)))
                return false;
        return true;
    }

    std::string dimLocals(const Problem& p, const std::string& dimsPtr, const std::string& indent)
    {
        std::string s;
        for (const auto& d : p.dims)
            s += indent + "const double " + dimVar(d.name) + " = (double)" + dimsPtr + "->" + cIdent(d.name) + ";\n";
        for (const auto& d : p.dims)
            s += indent + "(void)" + dimVar(d.name) + ";\n";
        return s;
    }

    std::string paramList(const BundleModel& m)
    {
        std::string s = "const " + m.prefix + "_dims* dims";
        for (const auto& a : apiParams(*m.problem))
            s += ", " + a.cType + " " + a.name;
        return s + ", void* workspace, size_t workspace_bytes, cudaStream_t stream";
    }

    std::string argList(const BundleModel& m)
    {
        std::string s = "dims";
        for (const auto& a : apiParams(*m.problem))
            s += ", " + a.name;
        return s + ", workspace, workspace_bytes, stream";
    }

    std::string workspaceSizeBody(const BundleModel& m, const KernelImpl& k)
    {
        std::string s = dimLocals(*m.problem, "dims", "    ");
        s += "    size_t kl_total = 0;\n    long long kl_bytes = 0;\n";
        for (const auto& w : k.spec.workspaces) {
            const std::string e = toCExpression(
                w.bytes.text(), identMap(*m.problem, &k.params, "workspace " + w.name), "workspace " + w.name);
            s += "    /* " + w.name + ": " + commentSafe(w.bytes.text()) + " bytes */\n";
            s += "    if (!klx_to_int(" + e + ", 0, LLONG_MAX, &kl_bytes)) return (size_t)-1;\n";
            s += "    kl_total += ((size_t)kl_bytes + 255u) & ~(size_t)255u;\n";
        }
        if (k.spec.workspaces.empty())
            s += "    (void)kl_bytes;\n";
        return s + "    return kl_total;\n";
    }

    std::string supportsBody(const BundleModel& m, const KernelImpl& k)
    {
        std::string s = dimLocals(*m.problem, "dims", "    ");
        for (const auto& c : k.spec.constraints) {
            if (!boundBy(c.expr.text(), *m.problem, &k.params)) {
                s += "    /* not checked here (names no dim or parameter): " + commentSafe(c.expr.text()) + " */\n";
                continue;
            }
            const std::string e
                = toCExpression(c.expr.text(), identMap(*m.problem, &k.params, "constraint"), "constraint");
            s += "    if (!((" + e + ") != 0.0)) {\n        if (why) *why = "
                + cString("the " + k.role + "'s constraint '" + c.expr.text() + "' does not hold")
                + ";\n        return 0;\n    }\n";
        }
        // Kernel arguments are ints: a dim the kernel receives must fit.
        for (const auto& d : m.problem->dims)
            s += "    if (dims->" + cIdent(d.name) + " > INT_MAX) {\n        if (why) *why = "
                + cString(d.name + " does not fit the kernel's int argument") + ";\n        return 0;\n    }\n";
        // A shape whose tensor map cuTensorMapEncodeTiled would refuse goes to the fallback.
        for (std::size_t i = 0; i < k.spec.tensorMaps.size(); ++i)
            s += "    {\n        " + m.prefix + "_tensor_map kl_map;\n        if (!" + m.prefix + "_" + k.role
                + "_tensor_map(" + std::to_string(i) + ", dims, &kl_map, why)) return 0;\n    }\n";
        return s + "    return 1;\n";
    }

    bool validProblemShape(const Problem& p, const Shape& s)
    {
        std::string why;
        for (const auto& d : p.dims) {
            const auto it = s.dims.find(d.name);
            if (it == s.dims.end() || it->second < d.min || it->second > d.max)
                return false;
            if (d.multipleOf > 1 && it->second % d.multipleOf != 0)
                return false;
        }
        const Bindings b = s.bindings();
        for (const auto& c : p.dimConstraints) {
            try {
                if (!c.evaluateBool(b))
                    return false;
            } catch (const ExprError&) {
                return false;
            }
        }
        return true;
    }

    bool implSupports(const BundleModel& m, const KernelImpl& k, const Shape& s)
    {
        for (const auto& d : m.problem->dims) {
            const auto it = s.dims.find(d.name);
            if (it == s.dims.end() || it->second > INT_MAX)
                return false;
        }
        if (!k.spec.satisfies(k.params, s.bindings()))
            return false;
        for (const auto& map : k.spec.tensorMaps) {
            try {
                resolveTensorMap(map, *m.problem, bindingsFor(k.params, s.bindings()));
            } catch (const InputError&) {
                return false;
            }
        }
        return true;
    }

    // The tensor maps of one implementation as a C function over the dims: the geometry cuTensorMapEncodeTiled
    // takes, or 0 and why where it would refuse the map at this shape. The rules are core/tensor_map.cpp's
    // (resolveTensorMap), re-stated in C for the bundle; the dispatch self-test checks the two agree.
    std::string tensorMapGeometryC(const BundleModel& m, const KernelImpl& k)
    {
        const std::string& P = m.prefix;
        const Problem& p = *m.problem;
        std::ostringstream o;
        o << "int " << P << "_" << k.role << "_tensor_map_count(void) { return " << k.spec.tensorMaps.size()
          << "; }\n\n";
        o << "int " << P << "_" << k.role << "_tensor_map(int index, const " << P << "_dims* dims, " << P
          << "_tensor_map* map, const char** why)\n{\n";
        o << "    const char* kl_unused = NULL;\n    long long kl_v = 0;\n    unsigned long long kl_stride = 0;\n";
        o << "    if (!why) why = &kl_unused;\n    if (!dims || !map) {\n        *why = \"no dims\";\n        return "
             "0;\n"
             "    }\n";
        o << dimLocals(p, "dims", "    ");
        o << "    (void)kl_v;\n    (void)kl_stride;\n    switch (index) {\n";
        for (std::size_t i = 0; i < k.spec.tensorMaps.size(); ++i) {
            const TensorMapSpec& map = k.spec.tensorMaps[i];
            const TensorSpec* t = p.tensor(map.tensor);
            const std::string where = "@kl:tensormap " + map.name + " (line " + std::to_string(map.line) + ")";
            if (!t)
                throw InputError(where + ": '" + map.tensor + "' is not a tensor of " + p.name);
            const int rank = static_cast<int>(t->shape.size());
            if (rank < 1 || rank > TensorMapSpec::kMaxRank || static_cast<int>(map.box.size()) != rank
                || (!map.elementStrides.empty() && static_cast<int>(map.elementStrides.size()) != rank))
                throw InputError(where + ": its box does not match the rank of " + map.tensor);
            if (map.interleave == TmaInterleave::B32 && map.swizzle != TmaSwizzle::B32)
                throw InputError(where + ": 32-byte interleave needs swizzle=32B");
            const int elem = static_cast<int>(dtypeBytes(t->dtype));
            const int strideAlign = map.interleave == TmaInterleave::B32 ? 32 : 16;
            const int interleaveBytes = map.interleave == TmaInterleave::None ? 0
                : map.interleave == TmaInterleave::B16                        ? 16
                                                                              : 32;
            const int l2Bytes = map.l2Promotion == TmaL2Promotion::None ? 0
                : map.l2Promotion == TmaL2Promotion::B64                ? 64
                : map.l2Promotion == TmaL2Promotion::B128               ? 128
                                                                        : 256;
            const auto fail = [&](const std::string& why) {
                return "        {\n            *why = " + cString(map.name + " " + why)
                    + ";\n            return 0;\n        }\n";
            };
            const auto ex = [&](const Expr& e, const std::string& what) {
                return toCExpression(e.text(), identMap(p, &k.params, where + " " + what), where + " " + what);
            };
            o << "    case " << i << ": /* " << map.name << ": tensor " << map.tensor << ", line " << map.line
              << " */\n";
            o << "        map->rank = " << rank << ";\n        map->dtype_bytes = " << elem
              << ";\n        map->interleave_bytes = " << interleaveBytes
              << ";\n        map->swizzle_bytes = " << static_cast<int>(swizzleSpanBytes(map.swizzle))
              << ";\n        map->l2_promotion_bytes = " << l2Bytes
              << ";\n        map->oob_nan = " << (map.oobFill == TmaOobFill::Nan ? 1 : 0) << ";\n";
            o << "        kl_stride = " << elem << "ULL;\n";
            for (int d = 0; d < rank; ++d) {
                const std::string ds = std::to_string(d);
                o << "        if (!klx_to_int(" << ex(t->shape[static_cast<std::size_t>(rank - 1 - d)], "tensor")
                  << ", 1, 4294967296LL, &kl_v))\n"
                  << fail(map.tensor + " dimension " + ds + " (innermost first) is not 1 to 2^32");
                o << "        map->dim[" << d << "] = (unsigned long long)kl_v;\n";
                if (d > 0)
                    o << "        if (kl_stride % " << strideAlign << "ULL != 0 || kl_stride >= (1ULL << 40))\n"
                      << fail(map.tensor + " dimension " + ds + "'s stride is not a multiple of "
                             + std::to_string(strideAlign) + " bytes below 2^40")
                      << "        map->stride_bytes[" << d - 1 << "] = kl_stride;\n";
                o << "        kl_stride *= map->dim[" << d << "];\n";
                o << "        if (!klx_to_int(" << ex(map.box[static_cast<std::size_t>(d)], "box") << ", 1, "
                  << TensorMapSpec::kMaxBox << "LL, &kl_v))\n"
                  << fail("box[" + ds + "] is not 1 to 256") << "        map->box[" << d << "] = (unsigned)kl_v;\n";
                if (map.elementStrides.empty())
                    o << "        map->element_strides[" << d << "] = 1u;\n";
                else
                    o << "        if (!klx_to_int(" << ex(map.elementStrides[static_cast<std::size_t>(d)], "elemstride")
                      << ", 1, " << TensorMapSpec::kMaxElementStride << "LL, &kl_v))\n"
                      << fail("elemstride[" + ds + "] is not 1 to 8") << "        map->element_strides[" << d
                      << "] = (unsigned)kl_v;\n";
            }
            if (map.interleave == TmaInterleave::None) {
                o << "        if ((unsigned long long)map->box[0] * " << elem << "ULL % 16ULL != 0)\n"
                  << fail("box[0] is not a multiple of 16 bytes");
                if (const int span = static_cast<int>(swizzleSpanBytes(map.swizzle)))
                    o << "        if ((unsigned long long)map->box[0] * " << elem << "ULL > " << span << "ULL)\n"
                      << fail("box[0] is wider than the " + std::to_string(span) + "-byte swizzle span");
            }
            o << "        return 1;\n";
        }
        o << "    default:\n        *why = \"no such tensor map\";\n        return 0;\n    }\n}\n\n";
        return o.str();
    }

} // namespace

std::string cIdent(const std::string& s)
{
    std::string out;
    for (char c : s)
        out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
    if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0])))
        out = "_" + out;
    if (reservedNames().count(out))
        out += "_";
    return out;
}

std::string upperOf(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
    return s;
}

std::string lowerOf(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

std::string commentSafe(const std::string& s)
{
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '\n' || c == '\r' || c == '\t')
            out += ' ';
        else if (c == '*' && i + 1 < s.size() && s[i + 1] == '/')
            out += "* ";
        else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*')
            out += "/ ";
        else if (static_cast<unsigned char>(c) >= 0x20 || c < 0)
            out += c;
    }
    return out;
}

std::vector<ApiParam> apiParams(const Problem& p)
{
    std::vector<ApiParam> out;
    for (const auto& t : p.tensors) {
        ApiParam a;
        a.tensor = true;
        a.output = t.role == TensorRole::Output;
        a.inPlace = t.role == TensorRole::InOut;
        a.cType = writesOutput(t.role) ? "void*" : "const void*";
        a.name = cIdent(t.name);
        a.spec = &t;
        out.push_back(a);
    }
    for (const auto& s : p.scalars) {
        ApiParam a;
        a.cType = s.dtype == DType::I32 ? "int" : (s.dtype == DType::F64 ? "double" : "float");
        a.name = cIdent(s.name);
        a.scalar = &s;
        out.push_back(a);
    }
    return out;
}

std::string scalarValueC(const ScalarSpec& s, const std::string& dimsPtr)
{
    if (!s.formula)
        return fmtDouble(s.value);
    return toCExpression(
        s.formula->text(), [&](const std::string& name) { return "(double)" + dimsPtr + "->" + cIdent(name); },
        "scalar " + s.name);
}

int addDeviceQualifiers(std::string& src)
{
    // A light scanner: comments, strings and preprocessor lines are skipped; braces of namespace and
    // extern "C" blocks do not count as nesting; a ')' followed (after qualifiers) by '{' at namespace
    // depth ends a function head, and the head starts after the previous ';', '}' or preprocessor line.
    std::vector<std::size_t> inserts;
    std::vector<bool> transparent; // brace stack: true for namespace / extern "C" blocks
    int depth = 0; // non-transparent braces open
    std::size_t stmtStart = 0;
    std::size_t i = 0;
    const std::size_t n = src.size();
    auto headText = [&](std::size_t from, std::size_t to) { return src.substr(from, to - from); };
    while (i < n) {
        const char c = src[i];
        if (c == '/' && i + 1 < n && (src[i + 1] == '/' || src[i + 1] == '*')) {
            // A comment before any declaration text is not part of the next function head.
            const bool leading = headText(stmtStart, i).find_first_not_of(" \t\r\n") == std::string::npos;
            if (src[i + 1] == '/') {
                i = src.find('\n', i);
                if (i == std::string::npos)
                    break;
            } else {
                const auto e = src.find("*/", i + 2);
                i = e == std::string::npos ? n : e + 2;
            }
            if (depth == 0 && leading)
                stmtStart = i;
            continue;
        }
        if (c == '"' || c == '\'') {
            ++i;
            while (i < n && src[i] != c) {
                if (src[i] == '\\')
                    ++i;
                ++i;
            }
            ++i;
            continue;
        }
        if (c == '#') {
            std::size_t b = i;
            while (b > 0 && (src[b - 1] == ' ' || src[b - 1] == '\t'))
                --b;
            if (b == 0 || src[b - 1] == '\n') {
                while (i < n && src[i] != '\n') {
                    if (src[i] == '\\' && i + 1 < n)
                        ++i;
                    ++i;
                }
                if (depth == 0)
                    stmtStart = i;
                continue;
            }
        }
        if (c == '{') {
            const std::string head = headText(stmtStart, i);
            const bool isNamespace = head.find("namespace") != std::string::npos
                || (head.find("extern") != std::string::npos && head.find("\"C\"") != std::string::npos
                    && head.find(')') == std::string::npos);
            if (depth == 0 && !isNamespace) {
                // A function definition when the head ends with ')' plus qualifiers.
                std::string h = head;
                while (!h.empty() && std::isspace(static_cast<unsigned char>(h.back())))
                    h.pop_back();
                for (const char* q : { "const", "noexcept", "override" }) {
                    const std::string qs(q);
                    if (h.size() >= qs.size() && h.compare(h.size() - qs.size(), qs.size(), qs) == 0) {
                        h.resize(h.size() - qs.size());
                        while (!h.empty() && std::isspace(static_cast<unsigned char>(h.back())))
                            h.pop_back();
                    }
                }
                const bool isFunction = !h.empty() && h.back() == ')' && h.find('=') == std::string::npos
                    && h.find("struct ") == std::string::npos && h.find("class ") == std::string::npos;
                const bool annotated = head.find("__device__") != std::string::npos
                    || head.find("__global__") != std::string::npos || head.find("__host__") != std::string::npos;
                if (isFunction && !annotated) {
                    std::size_t at = stmtStart;
                    while (at < i && std::isspace(static_cast<unsigned char>(src[at])))
                        ++at;
                    // After a template header: template <...>
                    if (src.compare(at, 8, "template") == 0) {
                        std::size_t k = src.find('<', at);
                        int angle = 0;
                        for (; k < i; ++k) {
                            if (src[k] == '<')
                                ++angle;
                            else if (src[k] == '>' && --angle == 0)
                                break;
                        }
                        at = k + 1;
                        while (at < i && std::isspace(static_cast<unsigned char>(src[at])))
                            ++at;
                    }
                    inserts.push_back(at);
                }
            }
            transparent.push_back(depth == 0 && isNamespace);
            if (!transparent.back())
                ++depth;
            ++i;
            if (depth == 0)
                stmtStart = i;
            continue;
        }
        if (c == '}') {
            if (!transparent.empty()) {
                if (!transparent.back())
                    --depth;
                transparent.pop_back();
            }
            ++i;
            if (depth == 0)
                stmtStart = i;
            continue;
        }
        if (c == ';' && depth == 0) {
            ++i;
            stmtStart = i;
            continue;
        }
        ++i;
    }
    for (auto it = inserts.rbegin(); it != inserts.rend(); ++it)
        src.insert(*it, "__device__ ");
    return static_cast<int>(inserts.size());
}

int expectedSelection(const BundleModel& m, const Shape& s)
{
    const bool fallbackOk = m.libraryFallback ? true : implSupports(m, m.fallback, s);
    if (validProblemShape(*m.problem, s) && implSupports(m, m.cand, s) && m.plan->dispatch.inCandidateRegion(s))
        return 1;
    return fallbackOk ? 0 : -1;
}

std::string genDispatchHeader(const BundleModel& m)
{
    const std::string& P = m.prefix;
    const std::string& U = m.upper;
    std::ostringstream o;
    o << "/* " << P << "_dispatch.h: which implementation serves a shape. Plain C, no CUDA.\n" << m.banner << " */\n";
    o << "#ifndef " << U << "_DISPATCH_H\n#define " << U << "_DISPATCH_H\n\n#include <stddef.h>\n\n";
    o << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
    o << "typedef struct " << P << "_dims {\n";
    for (const auto& d : m.problem->dims)
        o << "    long long " << cIdent(d.name) << ";\n";
    o << "} " << P << "_dims;\n\n";
    o << "enum {\n    " << U << "_IMPL_NONE = -1, /* nothing supports the shape */\n    " << U
      << "_IMPL_FALLBACK = 0,\n    " << U << "_IMPL_CANDIDATE = 1\n};\n\n";
    o << "/* The implementation kl_" << m.problem->name << " dispatches to; why (may be NULL) gets the reason. */\n";
    o << "int " << P << "_select(const " << P << "_dims* dims);\n";
    o << "int " << P << "_select_why(const " << P << "_dims* dims, const char** why);\n";
    o << "/* 1 when the shape is inside the problem's declared validity range. */\n";
    o << "int " << P << "_valid(const " << P << "_dims* dims, const char** why);\n";
    o << "int " << P << "_candidate_supports(const " << P << "_dims* dims, const char** why);\n";
    o << "int " << P << "_fallback_supports(const " << P << "_dims* dims, const char** why);\n";
    o << "/* Workspace bytes the caller must pass to run (the larger of both implementations); (size_t)-1 when the\n"
         "   shape has no valid size. Query once per shape bucket, allocate outside the hot path. */\n";
    o << "size_t " << P << "_workspace_bytes(const " << P << "_dims* dims);\n";
    o << "size_t " << P << "_candidate_workspace_bytes(const " << P << "_dims* dims);\n";
    o << "size_t " << P << "_fallback_workspace_bytes(const " << P << "_dims* dims);\n";
    o << "/* The dispatch table: boxes (per dim [lo, hi], in the order of " << P
      << "_dims) that go to the candidate. */\n";
    o << "int " << P << "_region_count(void);\n";
    o << "int " << P << "_region(int index, long long* lo, long long* hi);\n";
    o << "int " << P << "_dim_count(void);\n";
    o << "const char* " << P << "_dim_name(int index);\n\n";
    const bool maps = !m.cand.spec.tensorMaps.empty() || (!m.libraryFallback && !m.fallback.spec.tensorMaps.empty());
    if (maps) {
        o << "/* A TMA tensor map (@kl:tensormap) at one shape, innermost dimension first: what "
             "cuTensorMapEncodeTiled\n"
             "   takes, less the address. */\n";
        o << "typedef struct " << P
          << "_tensor_map {\n    int rank;\n    int dtype_bytes;\n    int interleave_bytes; /* 0, 16, 32 */\n"
             "    int swizzle_bytes; /* 0, 32, 64, 128 */\n    int l2_promotion_bytes; /* 0, 64, 128, 256 */\n"
             "    int oob_nan; /* out-of-bounds elements read as NaN, else zero */\n    unsigned long long dim[5];\n"
             "    unsigned long long stride_bytes[4]; /* of dimensions 1 .. rank-1 */\n    unsigned box[5];\n"
             "    unsigned element_strides[5];\n} "
          << P << "_tensor_map;\n\n";
        for (const KernelImpl* k : { &m.cand, &m.fallback }) {
            if (k->spec.tensorMaps.empty() || (k == &m.fallback && m.libraryFallback))
                continue;
            o << "/* The " << k->role
              << "'s tensor maps; 0 (and why) where the driver would refuse one at this shape. */\n";
            o << "int " << P << "_" << k->role << "_tensor_map_count(void);\n";
            o << "int " << P << "_" << k->role << "_tensor_map(int index, const " << P << "_dims* dims, " << P
              << "_tensor_map* map, const char** why);\n\n";
        }
    }
    o << "#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
    return o.str();
}

std::string genApiHeader(const BundleModel& m)
{
    const std::string& P = m.prefix;
    const std::string& U = m.upper;
    const auto& plan = *m.plan;
    std::ostringstream o;
    o << "/* " << P << ".h: C API of the exported " << m.problem->name << " kernel.\n" << m.banner;
    o << " *\n * Dispatch table (generated from the session's measurements):\n";
    for (const auto& r : plan.dispatch.candidateRegions)
        o << " *   " << r.label(plan.dispatch.dims) << "  ->  candidate " << m.candidate->id << " (" << r.wins
          << " shapes measured faster, " << fmtDouble(r.minSpeedup) << "x .. " << fmtDouble(r.maxSpeedup) << "x)\n";
    for (const auto& r : plan.dispatch.lossRegions)
        o << " *   " << r.label(plan.dispatch.dims) << "  ->  fallback (" << r.losses
          << " shapes where the candidate was not surely faster or not correct)\n";
    o << " *   everywhere else  ->  fallback: " << commentSafe(plan.fallbackDescription) << "\n";
    o << " *   The candidate is also used only where its own constraints hold and the shape is in the problem's\n"
         " *   validity range; "
      << P << "_select_why() says why a shape went where it did.\n *\n";
    o << " * Usage: size the workspace with " << P
      << "_workspace_bytes() and allocate it once, outside the hot path;\n"
         " * then call "
      << P
      << "_run() on your stream. It allocates nothing and never synchronizes, so it can be\n"
         " * captured into a CUDA graph (the workspace's address is then fixed, as graphs require).\n";
    if (m.libraryFallback)
        o << " * The cuBLAS fallback needs " << P << "_init() once per thread before the first run or capture.\n";
    o << " */\n";
    o << "#ifndef " << U << "_H\n#define " << U << "_H\n\n#include <stddef.h>\n#include <cuda_runtime_api.h>\n\n";
    o << "#include \"" << P << "_dispatch.h\"\n\n";
    o << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
    o << "enum {\n    " << U << "_OK = 0,\n    " << U << "_ERR_UNSUPPORTED_SHAPE = 1,\n    " << U
      << "_ERR_WORKSPACE_TOO_SMALL = 2,\n    " << U << "_ERR_LAUNCH = 3,\n    " << U << "_ERR_BAD_ARGUMENT = 4,\n    "
      << U << "_ERR_LIBRARY = 5\n};\n\n";
    o << "/* Tensors (device pointers, contiguous, row-major):\n";
    for (const auto& a : apiParams(*m.problem)) {
        if (a.tensor) {
            o << " *   " << a.name << ": " << dtypeName(a.spec->dtype) << " [";
            for (std::size_t i = 0; i < a.spec->shape.size(); ++i)
                o << (i ? ", " : "") << commentSafe(a.spec->shape[i].text());
            o << "] " << (a.inPlace ? "input and output, updated in place" : a.output ? "output" : "input") << "\n";
        } else {
            o << " *   " << a.name << ": scalar " << dtypeName(a.scalar->dtype) << " (problem value "
              << (a.scalar->formula ? commentSafe(a.scalar->formula->text()) : fmtDouble(a.scalar->value)) << ")\n";
        }
    }
    o << " */\n";
    o << "int " << P << "_run(" << paramList(m) << ");\n";
    o << "/* The two implementations, for tests and benchmarks; run() picks between them. */\n";
    o << "int " << P << "_run_candidate(" << paramList(m) << ");\n";
    o << "int " << P << "_run_fallback(" << paramList(m) << ");\n";
    if (m.cand.triton()) {
        o << "/* Loads the candidate's Triton CUBIN into the current device's context: call once per device before "
             "the\n   first run or CUDA-graph capture (a later first use on another context loads it then). */\n";
        o << "int " << P << "_init(void);\n";
        o << "int " << P << "_candidate_init(void); /* the CUBIN part of init */\n";
        o << "/* 1 when a CUBIN of the candidate runs on the GPU of stream's context (compiled for: ";
        for (std::size_t i = 0; i < m.cand.cubins.size(); ++i)
            o << (i ? ", " : "") << m.cand.cubins[i].arch;
        o << "); run() uses\n   the fallback elsewhere. */\n";
        o << "int " << P << "_candidate_available(cudaStream_t stream);\n";
        o << "/* The candidate's launch grid for dims (the launch plan's expressions): 0 when it has none. */\n";
        o << "int " << P << "_candidate_grid(const " << P << "_dims* dims, long long* grid);\n";
    } else {
        o << "/* Creates per-thread library state (cuBLAS handle); a no-op without a library fallback. */\n";
        o << "int " << P << "_init(void);\n";
    }
    o << "const char* " << P << "_error_string(int code);\n\n";
    o << "#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
    return o.str();
}

std::string genDispatchC(const BundleModel& m)
{
    const std::string& P = m.prefix;
    const std::string& U = m.upper;
    const auto& plan = m.plan->dispatch;
    const std::size_t nd = plan.dims.size();
    std::ostringstream o;
    o << "/* " << P << "_dispatch.c: the dispatch table and shape checks. Plain C (also valid C++), no CUDA.\n"
      << m.banner << " */\n";
    o << "#include \"" << P << "_dispatch.h\"\n#include \"kl_expr.h\"\n\n#include <limits.h>\n#include <stddef.h>\n\n";
    o << "typedef struct " << P << "_region_row {\n    long long lo[" << std::max<std::size_t>(nd, 1)
      << "];\n    long long hi[" << std::max<std::size_t>(nd, 1) << "];\n} " << P << "_region_row;\n\n";
    if (m.candidate)
        o << "/* Where candidate " << m.candidate->id << " was verified and measured faster than the baseline. */\n";
    else
        o << "/* No candidate: the fallback serves every shape. */\n";
    o << "static const " << P << "_region_row " << P << "_regions[] = {\n";
    if (plan.candidateRegions.empty())
        o << "    {{0}, {-1}} /* no region: the candidate was never measured faster; unused (count 0) */\n";
    for (const auto& r : plan.candidateRegions) {
        o << "    {{";
        for (std::size_t d = 0; d < nd; ++d)
            o << (d ? ", " : "") << r.ranges[d].lo << "LL";
        o << "}, {";
        for (std::size_t d = 0; d < nd; ++d)
            o << (d ? ", " : "") << r.ranges[d].hi << "LL";
        o << "}}, /* " << r.label(plan.dims) << ": " << r.wins << " wins, " << fmtDouble(r.minSpeedup) << "x .. "
          << fmtDouble(r.maxSpeedup) << "x */\n";
    }
    o << "};\nstatic const int " << P << "_n_regions = " << plan.candidateRegions.size() << ";\n\n";
    o << "static const char* const " << P << "_dim_names[] = {";
    for (std::size_t d = 0; d < nd; ++d)
        o << (d ? ", " : "") << cString(plan.dims[d]);
    if (nd == 0)
        o << "\"\"";
    o << "};\n\n";
    o << "int " << P << "_dim_count(void) { return " << nd << "; }\n";
    o << "const char* " << P << "_dim_name(int index) { return index >= 0 && index < " << nd << " ? " << P
      << "_dim_names[index] : NULL; }\n";
    o << "int " << P << "_region_count(void) { return " << P << "_n_regions; }\n\n";
    o << "int " << P
      << "_region(int index, long long* lo, long long* hi)\n{\n    int d;\n    if (index < 0 || index >= " << P
      << "_n_regions) return 0;\n    for (d = 0; d < " << nd << "; ++d) {\n        if (lo) lo[d] = " << P
      << "_regions[index].lo[d];\n        if (hi) hi[d] = " << P
      << "_regions[index].hi[d];\n    }\n    return 1;\n}\n\n";

    // Problem validity.
    o << "int " << P << "_valid(const " << P << "_dims* dims, const char** why)\n{\n";
    o << dimLocals(*m.problem, "dims", "    ");
    for (const auto& d : m.problem->dims) {
        o << "    if (dims->" << cIdent(d.name) << " < " << d.min << "LL || dims->" << cIdent(d.name) << " > " << d.max
          << "LL) {\n        if (why) *why = "
          << cString(d.name + " is outside the problem's range [" + std::to_string(d.min) + ", " + std::to_string(d.max)
                 + "]")
          << ";\n        return 0;\n    }\n";
        if (d.multipleOf > 1)
            o << "    if (dims->" << cIdent(d.name) << " % " << d.multipleOf << "LL != 0) {\n        if (why) *why = "
              << cString(d.name + " is not a multiple of " + std::to_string(d.multipleOf))
              << ";\n        return 0;\n    }\n";
    }
    for (const auto& c : m.problem->dimConstraints) {
        const std::string e
            = toCExpression(c.text(), identMap(*m.problem, nullptr, "problem constraint"), "problem constraint");
        o << "    if (!((" << e << ") != 0.0)) {\n        if (why) *why = "
          << cString("the problem's constraint '" + c.text() + "' does not hold") << ";\n        return 0;\n    }\n";
    }
    o << "    return 1;\n}\n\n";

    if (!m.cand.spec.tensorMaps.empty())
        o << tensorMapGeometryC(m, m.cand);
    if (!m.libraryFallback && !m.fallback.spec.tensorMaps.empty())
        o << tensorMapGeometryC(m, m.fallback);
    o << "int " << P << "_candidate_supports(const " << P << "_dims* dims, const char** why)\n{\n"
      << (m.candidate ? supportsBody(m, m.cand)
                      : "    (void)dims;\n    if (why) *why = \"no candidate was exported\";\n    return 0;\n")
      << "}\n\n";
    o << "int " << P << "_fallback_supports(const " << P << "_dims* dims, const char** why)\n{\n";
    if (m.libraryFallback) {
        o << dimLocals(*m.problem, "dims", "    ");
        for (const auto& d : m.problem->dims)
            o << "    if (dims->" << cIdent(d.name) << " < 0 || dims->" << cIdent(d.name)
              << " > INT_MAX) {\n        if (why) *why = "
              << cString(d.name + " does not fit the library's int argument") << ";\n        return 0;\n    }\n";
        o << "    return 1;\n";
    } else {
        o << supportsBody(m, m.fallback);
    }
    o << "}\n\n";

    o << "int " << P << "_select_why(const " << P << "_dims* dims, const char** why)\n{\n";
    o << "    const char* kl_unused = NULL;\n    long long kl_v[" << std::max<std::size_t>(nd, 1)
      << "];\n    int kl_i, kl_d;\n";
    o << "    if (!why) why = &kl_unused;\n";
    o << "    if (!dims) {\n        *why = \"no dims\";\n        return " << U << "_IMPL_NONE;\n    }\n";
    for (std::size_t d = 0; d < nd; ++d)
        o << "    kl_v[" << d << "] = dims->" << cIdent(plan.dims[d]) << ";\n";
    if (nd == 0)
        o << "    kl_v[0] = 0;\n";
    o << "    if (" << P << "_valid(dims, why) && " << P << "_candidate_supports(dims, why)) {\n";
    o << "        for (kl_i = 0; kl_i < " << P << "_n_regions; ++kl_i) {\n            int kl_inside = 1;\n";
    o << "            for (kl_d = 0; kl_d < " << nd << "; ++kl_d)\n                if (kl_v[kl_d] < " << P
      << "_regions[kl_i].lo[kl_d] || kl_v[kl_d] > " << P << "_regions[kl_i].hi[kl_d]) kl_inside = 0;\n";
    o << "            if (kl_inside) {\n                *why = \"inside a region where the candidate was verified and "
         "measured faster\";\n"
         "                return "
      << U << "_IMPL_CANDIDATE;\n            }\n        }\n";
    o << "        *why = \"outside the regions where the candidate was verified and measured faster\";\n    }\n";
    o << "    {\n        const char* kl_fallback_why = NULL;\n        if (" << P
      << "_fallback_supports(dims, &kl_fallback_why)) return " << U
      << "_IMPL_FALLBACK;\n        *why = kl_fallback_why;\n    }\n";
    o << "    return " << U << "_IMPL_NONE;\n}\n\n";
    o << "int " << P << "_select(const " << P << "_dims* dims) { return " << P << "_select_why(dims, NULL); }\n\n";

    o << "size_t " << P << "_candidate_workspace_bytes(const " << P << "_dims* dims)\n{\n"
      << workspaceSizeBody(m, m.cand) << "}\n\n";
    o << "size_t " << P << "_fallback_workspace_bytes(const " << P << "_dims* dims)\n{\n";
    if (m.libraryFallback)
        o << "    (void)dims;\n    return (size_t)32 << 20; /* cuBLAS workspace on Hopper (NVIDIA recommends 32 MiB) "
             "*/\n";
    else
        o << workspaceSizeBody(m, m.fallback);
    o << "}\n\n";
    o << "size_t " << P << "_workspace_bytes(const " << P << "_dims* dims)\n{\n    const size_t a = " << P
      << "_candidate_workspace_bytes(dims);\n    const size_t b = " << P << "_fallback_workspace_bytes(dims);\n"
      << "    if (a == (size_t)-1 || b == (size_t)-1) return (size_t)-1;\n    return a > b ? a : b;\n}\n";
    return o.str();
}

std::string genKernelHeader(const BundleModel& m, const KernelImpl& k, const std::string& title)
{
    std::ostringstream o;
    o << "/* " << title << "\n" << m.banner;
    o << " * Parameters baked in:";
    if (k.params.empty())
        o << " (none)";
    for (const auto& [n, v] : k.params)
        o << " " << n << "=" << v;
    o << "\n";
    if (k.devicePatched > 0)
        o << " * nvcc: __device__ was added to " << k.devicePatched
          << " helper function(s) that NVRTC compiled as device code (-default-device).\n";
    o << " * Launch plan (the host launcher in the matching .cu runs it):\n";
    for (const auto& l : k.spec.launches) {
        o << " *   " << l.kernel << " grid=(" << commentSafe(l.grid[0].text()) << ", " << commentSafe(l.grid[1].text())
          << ", " << commentSafe(l.grid[2].text()) << ") block=(" << commentSafe(l.block[0].text()) << ", "
          << commentSafe(l.block[1].text()) << ", " << commentSafe(l.block[2].text())
          << ") smem=" << commentSafe(l.sharedBytes.text()) << " args=(";
        for (std::size_t i = 0; i < l.args.size(); ++i)
            o << (i ? ", " : "") << l.args[i];
        o << ")\n";
    }
    o << " */\n" << k.source;
    if (!k.source.empty() && k.source.back() != '\n')
        o << "\n";
    return o.str();
}

namespace {

    // The launcher's table of driver entry points: kl_cu().tensorMapEncodeTiled for cuTensorMapEncodeTiled.
    std::string driverApiTable(const std::vector<std::string>& symbols)
    {
        const auto field = [](const std::string& symbol) {
            std::string f = symbol.substr(2);
            f[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(f[0])));
            return f;
        };
        std::ostringstream o;
        o << "/* The driver API through the runtime's entry points (CUDA 12.5+): the library does not link libcuda, "
             "so it\n   (and its self-test) loads on a machine without a driver, and the runtime's own driver is the "
             "one called. */\nstruct KlDriver {\n";
        for (const auto& sym : symbols)
            o << "    decltype(&" << sym << ") " << field(sym) << ";\n";
        o << "    bool ok;\n};\n\nconst KlDriver& kl_cu()\n{\n    static const KlDriver d = [] {\n        KlDriver r = "
             "{};\n"
             "        r.ok = true;\n";
        o << "#define KL_ENTRY(symbol, field) \\\n    do { \\\n"
             "        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound; \\\n"
             "        r.ok = r.ok && cudaGetDriverEntryPointByVersion(#symbol, (void**)&r.field, 12000, "
             "cudaEnableDefault, &q) \\\n"
             "                == cudaSuccess && q == cudaDriverEntryPointSuccess && r.field; \\\n    } while (0)\n";
        for (const auto& sym : symbols)
            o << "        KL_ENTRY(" << sym << ", " << field(sym) << ");\n";
        o << "#undef KL_ENTRY\n        return r;\n    }();\n    return d;\n}\n\n";
        return o.str();
    }

    // The driver-API side of a Triton candidate's launcher: its CUBINs are loaded once per CUDA context (the
    // caller's stream's), the one matching the device's compute capability, and the grid is a function of its own
    // so the PyTorch module can launch the Triton source with the same grid.
    std::string tritonLoader(const BundleModel& m, const KernelImpl& k)
    {
        const std::string& P = m.prefix;
        const Problem& p = *m.problem;
        const LaunchStep& l = k.spec.launches.front();
        std::ostringstream o;
        o << "#include \"" << P << "_candidate_cubin.h\"\n\n#include <cuda.h>\n#include <mutex>\n\n";
        o << "namespace {\n\n";
        o << driverApiTable(
            { "cuModuleLoadData", "cuModuleGetFunction", "cuFuncSetAttribute", "cuLaunchKernelEx", "cuStreamGetCtx",
                "cuCtxGetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxGetDevice", "cuDeviceGetAttribute" });
        o << "struct KlLoaded {\n    CUcontext ctx;\n    CUmodule module;\n    CUfunction fn; /* NULL: no CUBIN for "
             "this device, or it did not load */\n    int cubin;\n};\n";
        o << "std::mutex kl_mutex;\nKlLoaded kl_loaded[64];\nint kl_n_loaded = 0;\n\n";
        o << "/* sm_XYa CUBINs run only on compute capability X.Y; sm_XY ones on X.Y and later minors of X. */\n";
        o << "int kl_pick_cubin(CUdevice dev)\n{\n    int major = 0, minor = 0, best = -1, i;\n"
             "    if (kl_cu().deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != "
             "CUDA_SUCCESS\n"
             "        || kl_cu().deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != "
             "CUDA_SUCCESS)\n        return -1;\n";
        o << "    for (i = 0; i < " << P << "_cubin_count; ++i) {\n        const " << P << "_cubin& c = " << P
          << "_cubins[i];\n        const bool fits = c.major == major && (c.arch_specific ? c.minor == minor : c.minor "
             "<= "
             "minor);\n        if (fits && (best < 0 || c.minor > "
          << P << "_cubins[best].minor))\n            best = i;\n    }\n    return best;\n}\n\n";
        o << "/* The candidate in ctx: its module loaded once per context (a module belongs to one context). */\n";
        o << "const KlLoaded* kl_load(CUcontext ctx)\n{\n    if (!kl_cu().ok)\n        return NULL;\n    "
             "std::lock_guard<std::mutex> lock(kl_mutex);\n"
             "    for (int i = 0; i < kl_n_loaded; ++i)\n        if (kl_loaded[i].ctx == ctx)\n            return "
             "&kl_loaded[i];\n    if (kl_n_loaded == 64)\n        return NULL;\n";
        o << "    KlLoaded& l = kl_loaded[kl_n_loaded];\n    l.ctx = ctx;\n    l.module = NULL;\n    l.fn = NULL;\n"
             "    l.cubin = -1;\n    CUdevice dev;\n    CUcontext popped;\n";
        o << "    if (kl_cu().ctxPushCurrent(ctx) != CUDA_SUCCESS)\n        return NULL;\n";
        o << "    const int c = kl_cu().ctxGetDevice(&dev) == CUDA_SUCCESS ? kl_pick_cubin(dev) : -1;\n";
        o << "    if (c >= 0 && kl_cu().moduleLoadData(&l.module, " << P << "_cubins[c].data) == CUDA_SUCCESS\n"
          << "        && kl_cu().moduleGetFunction(&l.fn, l.module, " << P << "_cubins[c].symbol) == CUDA_SUCCESS\n"
          << "        && (" << P << "_cubins[c].shared_bytes <= 48 * 1024\n"
          << "            || kl_cu().funcSetAttribute(l.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, " << P
          << "_cubins[c].shared_bytes) == CUDA_SUCCESS))\n        l.cubin = c;\n    else\n        l.fn = NULL;\n";
        o << "    kl_cu().ctxPopCurrent(&popped);\n    ++kl_n_loaded;\n    return &l;\n}\n\n";
        o << "const KlLoaded* kl_load_for(cudaStream_t stream)\n{\n    CUcontext ctx = NULL;\n"
             "    if (!kl_cu().ok || kl_cu().streamGetCtx((CUstream)stream, &ctx) != CUDA_SUCCESS || !ctx)\n        "
             "return NULL;\n"
             "    const KlLoaded* l = kl_load(ctx);\n    return l && l->fn ? l : NULL;\n}\n\n";
        o << "} // namespace\n\n";
        o << "extern \"C\" int " << P << "_candidate_init(void)\n{\n"
          << "    /* Makes the runtime's context current and loads the CUBIN into it before any capture. */\n"
          << "    CUcontext ctx = NULL;\n    if (cudaFree(0) != cudaSuccess || !kl_cu().ok || "
             "kl_cu().ctxGetCurrent(&ctx) != CUDA_SUCCESS || "
             "!ctx)\n        return "
          << m.upper << "_ERR_LAUNCH;\n    kl_load(ctx);\n    return " << m.upper << "_OK;\n}\n\n";
        o << "extern \"C\" int " << P << "_candidate_available(cudaStream_t stream)\n{\n"
          << "    return kl_load_for(stream) != NULL;\n}\n\n";
        o << "extern \"C\" int " << P << "_candidate_grid(const " << P << "_dims* dims, long long* grid)\n{\n";
        o << "    if (!dims || !grid) return 0;\n" << dimLocals(p, "dims", "    ");
        for (int d = 0; d < 3; ++d)
            o << "    if (!klx_to_int(" << toCExpression(l.grid[d].text(), identMap(p, &k.params, "grid"), "grid")
              << ", 1, " << (d == 0 ? "2147483647LL" : "65535LL") << ", &grid[" << d << "])) return 0;\n";
        o << "    return 1;\n}\n\n";
        return o.str();
    }

    bool usesSmCount(const KernelImpl& k)
    {
        for (const auto& l : k.spec.launches) {
            std::vector<const Expr*> exprs = { &l.sharedBytes };
            for (int d = 0; d < 3; ++d)
                exprs.insert(exprs.end(), { &l.grid[d], &l.block[d], &l.cluster[d] });
            for (const Expr* e : exprs)
                for (const auto& id : e->identifiers())
                    if (id == kSmCountIdentifier)
                        return true;
        }
        return false;
    }

    const char* tensorMapDataTypeName(DType t)
    {
        switch (t) {
        case DType::F32:
            return "CU_TENSOR_MAP_DATA_TYPE_FLOAT32";
        case DType::F16:
            return "CU_TENSOR_MAP_DATA_TYPE_FLOAT16";
        case DType::BF16:
            return "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16";
        case DType::F64:
            return "CU_TENSOR_MAP_DATA_TYPE_FLOAT64";
        case DType::I32:
            return "CU_TENSOR_MAP_DATA_TYPE_INT32";
        case DType::I64:
            return "CU_TENSOR_MAP_DATA_TYPE_INT64";
        case DType::U8:
        case DType::FP8E4M3:
            return "CU_TENSOR_MAP_DATA_TYPE_UINT8";
        }
        return "CU_TENSOR_MAP_DATA_TYPE_UINT8";
    }

    // What a CUDA launcher needs beyond <<<>>>-style launches: the driver's tensor-map encoder and the device's
    // multiprocessor count for SM_COUNT grids.
    std::string hopperLaunchSupport(const KernelImpl& k)
    {
        std::ostringstream o;
        if (!k.spec.tensorMaps.empty())
            o << "#include <cuda.h>\n\nnamespace {\n\n"
              << driverApiTable({ "cuTensorMapEncodeTiled" }) << "} // namespace\n\n";
        if (usesSmCount(k))
            o << "/* SM_COUNT in the launch plan: the current device's multiprocessor count, read once per device.\n"
                 "   cudaDeviceGetAttribute is not a stream operation, so this is capturable. 0 on failure. */\n"
                 "static int kl_device_sm_count(void)\n{\n    static std::atomic<int> kl_sms[64];\n"
                 "    int dev = 0, n = 0;\n    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return "
                 "0;\n    n = kl_sms[dev].load();\n"
                 "    if (n == 0 && cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess)\n"
                 "        kl_sms[dev].store(n);\n    return n;\n}\n\n";
        return o.str();
    }

    // Each @kl:tensormap encoded for the caller's buffer before the first launch, on the host (capturable): the
    // geometry from the dispatcher's C function, the enums the harness used. A shape or address the driver would
    // refuse returns ERR_UNSUPPORTED_SHAPE before anything is launched, and the dispatcher then runs the fallback.
    std::string encodeTensorMaps(const BundleModel& m, const KernelImpl& k)
    {
        static const char* const swizzle[] = { "CU_TENSOR_MAP_SWIZZLE_NONE", "CU_TENSOR_MAP_SWIZZLE_32B",
            "CU_TENSOR_MAP_SWIZZLE_64B", "CU_TENSOR_MAP_SWIZZLE_128B" };
        static const char* const interleave[]
            = { "CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_INTERLEAVE_16B", "CU_TENSOR_MAP_INTERLEAVE_32B" };
        static const char* const l2[] = { "CU_TENSOR_MAP_L2_PROMOTION_NONE", "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
            "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "CU_TENSOR_MAP_L2_PROMOTION_L2_256B" };
        const std::string& P = m.prefix;
        const std::string& U = m.upper;
        std::ostringstream o;
        for (std::size_t i = 0; i < k.spec.tensorMaps.size(); ++i) {
            const TensorMapSpec& map = k.spec.tensorMaps[i];
            const TensorSpec* t = m.problem->tensor(map.tensor);
            const std::string v = "kl_tm_" + cIdent(map.name);
            o << "    /* @kl:tensormap " << map.name << " over " << map.tensor << " (line " << map.line << ") */\n";
            o << "    alignas(64) CUtensorMap " << v << ";\n    {\n        " << P << "_tensor_map g;\n";
            o << "        cuuint64_t dim[5], stride[4];\n        cuuint32_t box[5], es[5];\n        int d;\n";
            o << "        if (!" << P << "_" << k.role << "_tensor_map(" << i << ", dims, &g, NULL)) return " << U
              << "_ERR_UNSUPPORTED_SHAPE;\n";
            o << "        if ((uintptr_t)" << cIdent(map.tensor)
              << " % (g.interleave_bytes == 32 ? 32u : 16u) != 0) return " << U << "_ERR_UNSUPPORTED_SHAPE;\n";
            o << "        for (d = 0; d < g.rank; ++d) {\n            dim[d] = (cuuint64_t)g.dim[d];\n"
                 "            box[d] = (cuuint32_t)g.box[d];\n            es[d] = (cuuint32_t)g.element_strides[d];\n"
                 "            if (d > 0) stride[d - 1] = (cuuint64_t)g.stride_bytes[d - 1];\n        }\n";
            o << "        if (!kl_cu().ok\n            || kl_cu().tensorMapEncodeTiled(&" << v << ", "
              << tensorMapDataTypeName(t->dtype) << ", (cuuint32_t)g.rank, (void*)" << cIdent(map.tensor)
              << ", dim, stride, box, es,\n                   " << interleave[static_cast<int>(map.interleave)] << ", "
              << swizzle[static_cast<int>(map.swizzle)] << ", " << l2[static_cast<int>(map.l2Promotion)] << ", "
              << (map.oobFill == TmaOobFill::Nan ? "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"
                                                 : "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")
              << ")\n                   != CUDA_SUCCESS)\n            return " << U
              << "_ERR_UNSUPPORTED_SHAPE;\n    }\n";
        }
        return o.str();
    }

} // namespace

std::string genKernelLauncher(const BundleModel& m, const KernelImpl& k)
{
    const std::string& P = m.prefix;
    const std::string& U = m.upper;
    const Problem& p = *m.problem;
    const bool triton = k.triton();
    std::ostringstream o;
    if (triton)
        o << "/* " << P << "_" << k.role << ".cu: host launcher of the " << k.role
          << " kernel: Triton's CUBIN through the CUDA driver API\n"
          << " * (cuModuleLoadData once per context, cuLaunchKernelEx). No Python, no Triton at run time.\n"
          << " * No allocation, no synchronization, launches only on the caller's stream: CUDA-graph capturable once\n"
          << " * " << P << "_init() has loaded the CUBIN. The arguments follow Triton's ABI as the KernelLoop harness "
          << "passed them:\n"
          << " * the launch plan's named arguments (pointers, int32 dims, fp32 scalars), then one null pointer per "
             "scratch\n"
          << " * buffer Triton appends, num_warps * 32 threads and the shared memory Triton sized.\n */\n";
    else
        o << "/* " << P << "_" << k.role << ".cu: host launcher of the " << k.role << " kernel (CUDA runtime API).\n"
          << " * No allocation, no synchronization, launches only on the caller's stream: CUDA-graph capturable.\n"
          << " * Kernels are launched through cudaLaunchKernel with the launch plan's named arguments, exactly as the\n"
          << " * KernelLoop harness launched them when it measured this kernel.\n */\n";
    o << "#include \"" << P
      << ".h\"\n#include \"kl_expr.h\"\n\n#include <cuda_runtime.h>\n#include <limits.h>\n#include "
         "<stdint.h>\n#include <atomic>\n\n";
    if (triton) {
        o << tritonLoader(m, k);
    } else {
        std::set<std::string> kernels;
        for (const auto& l : k.spec.launches)
            kernels.insert(l.kernel);
        o << "/* Each implementation lives in its own translation unit; renaming its kernels keeps the symbols of the\n"
             "   candidate and the fallback apart when both define a kernel of the same name. */\n";
        for (const auto& kn : kernels)
            o << "#define " << kn << " " << P << "_" << k.role << "__" << kn << "\n";
        o << "#include \"" << P << "_" << k.role << ".cuh\"\n\n";
        o << hopperLaunchSupport(k);
    }
    o << "extern \"C\" int " << P << "_run_" << k.role << "(" << paramList(m) << ")\n{\n";
    o << "    const char* kl_why = NULL;\n    if (!dims) return " << U << "_ERR_BAD_ARGUMENT;\n";
    o << "    if (!" << P << "_" << k.role << "_supports(dims, &kl_why)) return " << U << "_ERR_UNSUPPORTED_SHAPE;\n";
    o << "    (void)kl_why;\n";
    o << dimLocals(p, "dims", "    ");
    for (const auto& a : apiParams(p))
        o << "    (void)" << a.name << ";\n";
    if (k.spec.workspaces.empty())
        o << "    (void)workspace;\n    (void)workspace_bytes;\n";
    else
        o << "    char* kl_ws = (char*)workspace;\n    size_t kl_ws_used = 0;\n";
    std::map<std::string, std::string> wsPtr;
    for (const auto& w : k.spec.workspaces) {
        const std::string id = cIdent(w.name);
        const std::string e
            = toCExpression(w.bytes.text(), identMap(p, &k.params, "workspace " + w.name), "workspace " + w.name);
        o << "    /* workspace " << w.name << ": " << commentSafe(w.bytes.text()) << " bytes"
          << (w.zeroInit ? ", zeroed" : "") << " */\n";
        o << "    long long kl_wsb_" << id << " = 0;\n";
        o << "    if (!klx_to_int(" << e << ", 0, LLONG_MAX, &kl_wsb_" << id << ")) return " << U
          << "_ERR_UNSUPPORTED_SHAPE;\n";
        o << "    void* kl_ws_" << id << " = kl_ws + kl_ws_used;\n";
        o << "    kl_ws_used += ((size_t)kl_wsb_" << id << " + 255u) & ~(size_t)255u;\n";
        wsPtr[w.name] = "kl_ws_" + id;
    }
    if (!k.spec.workspaces.empty()) {
        o << "    if (kl_ws_used > 0 && (workspace == NULL || kl_ws_used > workspace_bytes)) return " << U
          << "_ERR_WORKSPACE_TOO_SMALL;\n";
        for (const auto& w : k.spec.workspaces)
            if (w.zeroInit)
                o << "    if (kl_wsb_" << cIdent(w.name) << " > 0 && cudaMemsetAsync(kl_ws_" << cIdent(w.name)
                  << ", 0, (size_t)kl_wsb_" << cIdent(w.name) << ", stream) != cudaSuccess) return " << U
                  << "_ERR_LAUNCH;\n";
    }
    if (triton)
        o << "    const KlLoaded* kl_loaded_fn = kl_load_for(stream);\n    if (!kl_loaded_fn) return " << U
          << "_ERR_LAUNCH; /* no CUBIN for this GPU: " << P << "_run uses the fallback */\n";
    else
        o << encodeTensorMaps(m, k);
    if (usesSmCount(k))
        o << "    const double kl_sm_count = (double)kl_device_sm_count();\n    if (kl_sm_count < 1) return " << U
          << "_ERR_LAUNCH;\n";
    int step = 0;
    for (const auto& l : k.spec.launches) {
        ++step;
        auto ex = [&](const Expr& e, const std::string& what) {
            return toCExpression(e.text(), identMap(p, &k.params, what, true), what);
        };
        o << "    /* launch " << step << " of " << k.spec.launches.size() << ": " << l.kernel << " grid=("
          << commentSafe(l.grid[0].text()) << ", " << commentSafe(l.grid[1].text()) << ", "
          << commentSafe(l.grid[2].text()) << ") block=(" << commentSafe(l.block[0].text()) << ", "
          << commentSafe(l.block[1].text()) << ", " << commentSafe(l.block[2].text())
          << ") smem=" << commentSafe(l.sharedBytes.text())
          << "\n       (parameters are baked into the expressions below) */\n    {\n";
        o << "        long long kl_g[3], kl_b[3], kl_smem;\n";
        if (triton)
            o << "        if (!" << P << "_candidate_grid(dims, kl_g)) return " << U << "_ERR_UNSUPPORTED_SHAPE;\n";
        for (int d = 0; d < 3; ++d) {
            if (!triton)
                o << "        if (!klx_to_int(" << ex(l.grid[d], "grid") << ", 0, "
                  << (d == 0 ? "2147483647LL" : "65535LL") << ", &kl_g[" << d << "])) return " << U
                  << "_ERR_UNSUPPORTED_SHAPE;\n";
            o << "        if (!klx_to_int(" << ex(l.block[d], "block") << ", 1, 1024, &kl_b[" << d << "])) return " << U
              << "_ERR_UNSUPPORTED_SHAPE;\n";
        }
        o << "        if (kl_b[0] * kl_b[1] * kl_b[2] > 1024) return " << U << "_ERR_UNSUPPORTED_SHAPE;\n";
        const std::string skipLabel = "kl_skip_" + std::to_string(step);
        if (!triton) // a grid of no blocks: the harness made no launch either
            o << "        if (kl_g[0] == 0 || kl_g[1] == 0 || kl_g[2] == 0) goto " << skipLabel << ";\n";
        o << "        if (!klx_to_int(" << ex(l.sharedBytes, "smem") << ", 0, INT_MAX, &kl_smem)) return " << U
          << "_ERR_UNSUPPORTED_SHAPE;\n";
        const std::string kname = P + "_" + k.role + "__" + l.kernel;
        if (triton)
            o << "        /* Triton sized the shared memory; the attribute above 48 KiB was set when the CUBIN loaded. "
                 "*/\n        kl_smem += "
              << P << "_cubins[kl_loaded_fn->cubin].shared_bytes;\n";
        else
            o << "        if (kl_smem > 0) {\n"
                 "            /* The 48 KiB without opting in include the kernel's static shared memory, so any "
                 "dynamic "
                 "size\n"
                 "               is opted into: a function attribute, not a stream operation, done once per size, "
                 "before or\n"
                 "               during capture. */\n"
                 "            static std::atomic<long long> kl_smem_opted{0};\n"
                 "            if (kl_smem > kl_smem_opted.load()) {\n"
                 "                if (cudaFuncSetAttribute((const void*)"
              << kname << ", cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kl_smem) != cudaSuccess) return " << U
              << "_ERR_LAUNCH;\n                kl_smem_opted.store(kl_smem);\n            }\n        }\n";
        std::vector<std::string> argNames;
        int ai = 0;
        for (const auto& a : l.args) {
            const std::string v = "kl_a" + std::to_string(ai++);
            if (k.spec.tensorMap(a) && !triton) {
                argNames.push_back("kl_tm_" + cIdent(a)); // a CUtensorMap, passed by value
                continue;
            }
            if (p.tensor(a)) {
                o << "        void* " << v << " = (void*)" << cIdent(a) << ";\n";
            } else if (wsPtr.count(a)) {
                o << "        void* " << v << " = " << wsPtr[a] << ";\n";
            } else if (p.dim(a)) {
                o << "        int " << v << " = (int)dims->" << cIdent(a) << ";\n";
            } else if (k.params.count(a)) {
                o << "        int " << v << " = " << k.params.at(a) << ";\n";
            } else {
                const ScalarSpec* s = nullptr;
                for (const auto& sc : p.scalars)
                    if (sc.name == a)
                        s = &sc;
                if (!s)
                    throw InputError("launch plan of the " + k.role + ", line " + std::to_string(l.line)
                        + ": argument '" + a + "' is not a tensor, workspace, dim, parameter or scalar of problem '"
                        + p.name + "'");
                // Triton's signature types every non-int scalar fp32 (triton_compiler.cpp), as the harness passed it.
                const std::string st = s->dtype == DType::I32 ? "int"
                    : (s->dtype == DType::F64 && !triton)     ? "double"
                                                              : "float";
                o << "        " << st << " " << v << " = " << cIdent(a) << ";\n";
            }
            argNames.push_back(v);
        }
        if (triton) {
            o << "        /* Triton's trailing scratch pointers: null, as the harness passed them (the compile refuses "
                 "a "
                 "kernel\n           that needs global scratch). */\n        void* kl_null = NULL;\n        void* "
                 "kl_args["
              << argNames.size() << " + 8];\n        int kl_n = 0;\n";
            for (const auto& a : argNames)
                o << "        kl_args[kl_n++] = (void*)&" << a << ";\n";
            o << "        for (int i = 0; i < " << P
              << "_cubins[kl_loaded_fn->cubin].trailing_null_pointers && i < 8; ++i)\n"
              << "            kl_args[kl_n++] = (void*)&kl_null;\n";
            o << "        CUlaunchConfig kl_cfg;\n        kl_cfg.gridDimX = (unsigned)kl_g[0];\n"
                 "        kl_cfg.gridDimY = (unsigned)kl_g[1];\n        kl_cfg.gridDimZ = (unsigned)kl_g[2];\n"
                 "        kl_cfg.blockDimX = (unsigned)kl_b[0];\n        kl_cfg.blockDimY = (unsigned)kl_b[1];\n"
                 "        kl_cfg.blockDimZ = (unsigned)kl_b[2];\n        kl_cfg.sharedMemBytes = (unsigned)kl_smem;\n"
                 "        kl_cfg.hStream = (CUstream)stream;\n        kl_cfg.attrs = NULL;\n        kl_cfg.numAttrs = "
                 "0;\n";
            o << "        if (kl_cu().launchKernelEx(&kl_cfg, kl_loaded_fn->fn, kl_args, NULL) != CUDA_SUCCESS)\n      "
                 "      return "
              << U << "_ERR_LAUNCH;\n    }\n";
            continue;
        }
        o << "        void* kl_args[] = {";
        for (std::size_t i = 0; i < argNames.size(); ++i)
            o << (i ? ", " : "") << "(void*)&" << argNames[i];
        if (argNames.empty())
            o << "NULL";
        o << "};\n";
        if (l.hasCluster || l.programmaticLaunch) {
            o << "        cudaLaunchConfig_t kl_cfg = {};\n        cudaLaunchAttribute kl_attr[2] = {};\n"
                 "        kl_cfg.gridDim = dim3((unsigned)kl_g[0], (unsigned)kl_g[1], (unsigned)kl_g[2]);\n"
                 "        kl_cfg.blockDim = dim3((unsigned)kl_b[0], (unsigned)kl_b[1], (unsigned)kl_b[2]);\n"
                 "        kl_cfg.dynamicSmemBytes = (size_t)kl_smem;\n        kl_cfg.stream = stream;\n"
                 "        kl_cfg.attrs = kl_attr;\n        kl_cfg.numAttrs = 0;\n";
            if (l.hasCluster) {
                o << "        {\n            long long kl_c[3];\n";
                for (int d = 0; d < 3; ++d)
                    o << "            if (!klx_to_int(" << ex(l.cluster[d], "cluster") << ", 1, " << kMaxClusterBlocks
                      << "LL, &kl_c[" << d << "]) || kl_g[" << d << "] % kl_c[" << d << "] != 0) return " << U
                      << "_ERR_UNSUPPORTED_SHAPE;\n";
                o << "            if (kl_c[0] * kl_c[1] * kl_c[2] > " << kMaxClusterBlocks << "LL) return " << U
                  << "_ERR_UNSUPPORTED_SHAPE;\n";
                o << "            /* a cluster of one block is a plain launch, as under the harness */\n"
                     "            if (kl_c[0] * kl_c[1] * kl_c[2] > 1) {\n"
                     "                kl_attr[kl_cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;\n"
                     "                kl_attr[kl_cfg.numAttrs].val.clusterDim.x = (unsigned)kl_c[0];\n"
                     "                kl_attr[kl_cfg.numAttrs].val.clusterDim.y = (unsigned)kl_c[1];\n"
                     "                kl_attr[kl_cfg.numAttrs].val.clusterDim.z = (unsigned)kl_c[2];\n"
                     "                ++kl_cfg.numAttrs;\n            }\n        }\n";
            }
            if (l.programmaticLaunch)
                o << "        /* pdl=1: may start while the previous kernel on the stream drains; it waits with\n"
                     "           griddepcontrol.wait, as it did under the harness. */\n"
                     "        kl_attr[kl_cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;\n"
                     "        kl_attr[kl_cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;\n"
                     "        ++kl_cfg.numAttrs;\n";
            o << "        if (cudaLaunchKernelExC(&kl_cfg, (const void*)" << kname
              << ", kl_args) != cudaSuccess)\n            return " << U << "_ERR_LAUNCH;\n    }\n    " << skipLabel
              << ":;\n";
            continue;
        }
        o << "        if (cudaLaunchKernel((const void*)" << kname
          << ", dim3((unsigned)kl_g[0], (unsigned)kl_g[1], (unsigned)kl_g[2]), dim3((unsigned)kl_b[0], "
             "(unsigned)kl_b[1], "
             "(unsigned)kl_b[2]), kl_args, (size_t)kl_smem, stream) != cudaSuccess)\n            return "
          << U << "_ERR_LAUNCH;\n    }\n    " << skipLabel << ":;\n";
    }
    o << "    return " << U << "_OK;\n}\n";
    return o.str();
}

std::string genCublasLauncher(const BundleModel& m)
{
    // Row-major C[M,N] = A[M,K] * B with B stored [K,N] or [N,K]: cuBLAS is column-major, so it computes
    // C^T = B^T A^T, reading the row-major buffers as their transposes.
    const std::string& P = m.prefix;
    const std::string& U = m.upper;
    const Problem& p = *m.problem;
    const TensorSpec* c = nullptr;
    std::vector<const TensorSpec*> ins;
    for (const auto& t : p.tensors) {
        if (t.role == TensorRole::Output && !c)
            c = &t;
        else if (t.role == TensorRole::Input)
            ins.push_back(&t);
    }
    if (!c || ins.size() < 2 || c->shape.size() != 2 || ins[0]->shape.size() != 2 || ins[1]->shape.size() != 2)
        throw InputError("library baseline '" + p.libraryBaseline + "' of problem '" + p.name
            + "' needs inputs A[M,K], B[K,N] or B[N,K] and an output C[M,N]");
    const std::string mDim = c->shape[0].text(), nDim = c->shape[1].text();
    const TensorSpec* a = ins[0];
    const TensorSpec* b = ins[1];
    if (a->shape[0].text() != mDim)
        throw InputError("library baseline: the first input of '" + p.name + "' must be A[M,K]");
    const std::string kDim = a->shape[1].text();
    bool bTransposed = false; // B stored [N,K]
    if (b->shape[0].text() == kDim && b->shape[1].text() == nDim)
        bTransposed = false;
    else if (b->shape[0].text() == nDim && b->shape[1].text() == kDim)
        bTransposed = true;
    else
        throw InputError("library baseline: the second input of '" + p.name + "' must be B[K,N] or B[N,K]");
    auto cudaType = [&](DType t) -> std::string {
        switch (t) {
        case DType::BF16:
            return "CUDA_R_16BF";
        case DType::F16:
            return "CUDA_R_16F";
        case DType::F32:
            return "CUDA_R_32F";
        default:
            throw InputError(
                "library baseline: dtype " + std::string(dtypeName(t)) + " is not supported by the cuBLAS fallback");
        }
    };
    auto dimExpr = [&](const std::string& e) { return toCExpression(e, identMap(p, nullptr, "gemm dim"), "gemm dim"); };
    std::ostringstream o;
    o << "/* " << P << "_fallback.cu: the library fallback, cuBLAS (cublasGemmEx, fp32 accumulation).\n"
      << " * Row-major C[M,N] = A[M,K] * B" << (bTransposed ? "[N,K]^T" : "[K,N]")
      << "; cuBLAS is column-major, so it computes C^T = B^T A^T on the same buffers.\n"
      << " * The handle is per thread and created by " << P << "_init() (or lazily on first use outside capture);\n"
      << " * its workspace is the caller's, so nothing is allocated on the hot path and graph capture works.\n */\n";
    o << "#include \"" << P
      << ".h\"\n#include \"kl_expr.h\"\n\n#include <cublas_v2.h>\n#include <cuda_runtime.h>\n#include <limits.h>\n\n";
    o << "static thread_local cublasHandle_t kl_handle = nullptr;\n\n";
    o << "extern \"C\" int " << P << "_init(void)\n{\n";
    if (m.cand.triton())
        o << "    if (" << P << "_candidate_init() != " << U << "_OK) return " << U << "_ERR_LAUNCH;\n";
    o << "    if (kl_handle) return " << U << "_OK;\n"
      << "    return cublasCreate(&kl_handle) == CUBLAS_STATUS_SUCCESS ? " << U << "_OK : " << U
      << "_ERR_LIBRARY;\n}\n\n";
    o << "extern \"C\" int " << P << "_run_fallback(" << paramList(m) << ")\n{\n";
    o << "    if (!dims) return " << U << "_ERR_BAD_ARGUMENT;\n";
    o << "    if (!" << P << "_fallback_supports(dims, NULL)) return " << U << "_ERR_UNSUPPORTED_SHAPE;\n";
    o << "    if (!kl_handle && " << P << "_init() != " << U << "_OK) return " << U << "_ERR_LIBRARY;\n";
    o << dimLocals(p, "dims", "    ");
    o << "    long long kl_m, kl_n, kl_k;\n";
    o << "    if (!klx_to_int(" << dimExpr(mDim) << ", 0, INT_MAX, &kl_m) || !klx_to_int(" << dimExpr(nDim)
      << ", 0, INT_MAX, &kl_n) || !klx_to_int(" << dimExpr(kDim) << ", 0, INT_MAX, &kl_k)) return " << U
      << "_ERR_UNSUPPORTED_SHAPE;\n";
    o << "    const size_t kl_ws_need = " << P << "_fallback_workspace_bytes(dims);\n";
    o << "    if (workspace == NULL || workspace_bytes < kl_ws_need) return " << U << "_ERR_WORKSPACE_TOO_SMALL;\n";
    std::string alpha = "1.0f", beta = "0.0f";
    for (const auto& s : p.scalars) {
        if (s.name == "alpha")
            alpha = "(float)" + cIdent(s.name);
        if (s.name == "beta")
            beta = "(float)" + cIdent(s.name);
    }
    for (const auto& a2 : apiParams(p))
        if (a2.scalar)
            o << "    (void)" << a2.name << ";\n";
    o << "    const float kl_alpha = " << alpha << ", kl_beta = " << beta << ";\n";
    o << "    if (cublasSetStream(kl_handle, stream) != CUBLAS_STATUS_SUCCESS) return " << U << "_ERR_LIBRARY;\n";
    o << "    if (cublasSetWorkspace(kl_handle, workspace, kl_ws_need) != CUBLAS_STATUS_SUCCESS) return " << U
      << "_ERR_LIBRARY;\n";
    o << "    const cublasStatus_t kl_st = cublasGemmEx(kl_handle, " << (bTransposed ? "CUBLAS_OP_T" : "CUBLAS_OP_N")
      << ", CUBLAS_OP_N, (int)kl_n, (int)kl_m, (int)kl_k, &kl_alpha, " << cIdent(b->name) << ", " << cudaType(b->dtype)
      << ", " << (bTransposed ? "(int)kl_k" : "(int)kl_n") << ", " << cIdent(a->name) << ", " << cudaType(a->dtype)
      << ", (int)kl_k, &kl_beta, " << cIdent(c->name) << ", " << cudaType(c->dtype)
      << ", (int)kl_n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);\n";
    o << "    return kl_st == CUBLAS_STATUS_SUCCESS ? " << U << "_OK : " << U << "_ERR_LIBRARY;\n}\n";
    return o.str();
}

std::string genRunCu(const BundleModel& m)
{
    const std::string& P = m.prefix;
    const std::string& U = m.upper;
    std::ostringstream o;
    o << "/* " << P << "_run.cu: the dispatcher's entry point. */\n#include \"" << P << ".h\"\n\n";
    if (!m.libraryFallback)
        o << "extern \"C\" int " << P << "_init(void) { return "
          << (m.cand.triton() ? P + "_candidate_init()" : U + "_OK") << "; }\n\n";
    if (!m.candidate)
        o << "/* No candidate was exported: the C API keeps its shape, the candidate declines every shape. */\n"
          << "extern \"C\" int " << P << "_run_candidate(" << paramList(m) << ")\n{\n    (void)dims;\n"
          <<
            [&] {
                std::string v;
                for (const auto& a : apiParams(*m.problem))
                    v += "    (void)" + a.name + ";\n";
                return v;
            }()
          << "    (void)workspace;\n    (void)workspace_bytes;\n    (void)stream;\n    return " << U
          << "_ERR_UNSUPPORTED_SHAPE;\n}\n\n";
    o << "extern \"C\" int " << P << "_run(" << paramList(m) << ")\n{\n";
    o << "    switch (" << P << "_select(dims)) {\n    case " << U << "_IMPL_CANDIDATE:\n";
    if (m.cand.triton())
        o << "        /* Triton's CUBIN runs only on the architectures it was compiled for; elsewhere the fallback. "
             "*/\n"
          << "        if (!" << P << "_candidate_available(stream))\n            return " << P << "_run_fallback("
          << argList(m) << ");\n";
    // What the candidate declines at run time (a grid its cluster shape does not divide, a buffer its tensor maps
    // cannot address, an SM_COUNT grid out of range) it declines before launching its first kernel or, in a
    // multi-kernel plan, leaves to the fallback to overwrite: the fallback computes every output from the inputs.
    o << "    {\n        const int kl_rc = " << P << "_run_candidate(" << argList(m) << ");\n        if (kl_rc == " << U
      << "_ERR_UNSUPPORTED_SHAPE)\n            return " << P << "_run_fallback(" << argList(m)
      << ");\n        return kl_rc;\n    }\n";
    o << "    case " << U << "_IMPL_FALLBACK:\n        return " << P << "_run_fallback(" << argList(m)
      << ");\n    default:\n        return " << U << "_ERR_UNSUPPORTED_SHAPE;\n    }\n}\n\n";
    o << "extern \"C\" const char* " << P << "_error_string(int code)\n{\n    switch (code) {\n";
    o << "    case " << U << "_OK: return \"ok\";\n";
    o << "    case " << U << "_ERR_UNSUPPORTED_SHAPE: return \"shape not supported by the selected implementation\";\n";
    o << "    case " << U << "_ERR_WORKSPACE_TOO_SMALL: return \"workspace missing or smaller than " << P
      << "_workspace_bytes()\";\n";
    o << "    case " << U << "_ERR_LAUNCH: return \"kernel launch failed (see cudaGetLastError)\";\n";
    o << "    case " << U << "_ERR_BAD_ARGUMENT: return \"bad argument\";\n";
    o << "    case " << U << "_ERR_LIBRARY: return \"library call failed\";\n";
    o << "    default: return \"unknown error\";\n    }\n}\n";
    return o.str();
}

std::string cubinFileName(const BundleModel& m, const TritonCubin& c)
{
    return m.prefix + "_candidate." + cIdent(c.arch) + ".cubin";
}

std::string genCubinTable(const BundleModel& m, const KernelImpl& k)
{
    const std::string& P = m.prefix;
    std::ostringstream o;
    o << "/* " << P << "_candidate_cubin.h: Triton " << k.tritonVersion << "'s CUBIN(s) of candidate "
      << m.candidate->id << ", embedded so the library needs no file\n   at run time (the same bytes as cubin/";
    for (std::size_t i = 0; i < k.cubins.size(); ++i)
        o << (i ? ", cubin/" : "") << cubinFileName(m, k.cubins[i]);
    o << ").\n" << m.banner << " */\n";
    o << "#ifndef " << m.upper << "_CANDIDATE_CUBIN_H\n#define " << m.upper << "_CANDIDATE_CUBIN_H\n\n";
    o << "typedef struct " << P
      << "_cubin {\n    const char* arch;\n    int major;\n    int minor;\n"
         "    int arch_specific; /* sm_XYa: runs on X.Y only */\n    const unsigned char* data;\n    unsigned long "
         "long size;\n    const char* symbol;\n    int shared_bytes; /* dynamic, as Triton sized it */\n"
         "    int trailing_null_pointers; /* scratch pointers Triton appends to the parameters */\n} "
      << P << "_cubin;\n\n";
    std::vector<std::string> rows;
    for (const auto& c : k.cubins) {
        std::string digits = c.arch.substr(c.arch.rfind('_') + 1);
        const bool archSpecific = !digits.empty() && digits.back() == 'a';
        if (archSpecific)
            digits.pop_back();
        if (digits.size() < 2 || digits.find_first_not_of("0123456789") != std::string::npos)
            throw InputError("export: Triton arch '" + c.arch + "' is not sm_XY or sm_XYa");
        const std::string array = P + "_cubin_" + cIdent(c.arch);
        o << "alignas(16) static const unsigned char " << array << "[] = {";
        for (std::size_t i = 0; i < c.cubin.size(); ++i) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned char>(c.cubin[i]));
            o << (i % 16 == 0 ? "\n    " : " ") << hex << ",";
        }
        o << "\n};\n\n";
        rows.push_back("    { " + cString(c.arch) + ", " + digits.substr(0, digits.size() - 1) + ", "
            + digits.substr(digits.size() - 1) + ", " + (archSpecific ? "1" : "0") + ", " + array + ", sizeof(" + array
            + "), " + cString(c.symbol) + ", " + std::to_string(c.abi.dynamicSharedBytes) + ", "
            + std::to_string(c.abi.trailingNullPointers) + " },\n");
    }
    o << "static const " << P << "_cubin " << P << "_cubins[] = {\n";
    for (const auto& r : rows)
        o << r;
    o << "};\nstatic const int " << P << "_cubin_count = " << k.cubins.size() << ";\n\n#endif\n";
    return o.str();
}

} // namespace kl::exporter::detail
