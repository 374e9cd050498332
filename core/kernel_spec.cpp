#include "core/kernel_spec.h"

#include "core/errors.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

namespace kl {

namespace {

    std::string trim(const std::string& s)
    {
        std::size_t b = 0, e = s.size();
        while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
            ++b;
        while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
            --e;
        return s.substr(b, e - b);
    }

    bool isIdent(const std::string& s)
    {
        if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
            return false;
        for (char c : s)
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
                return false;
        return true;
    }

    // Splits "a, f(b, c), d" at top-level commas.
    std::vector<std::string> splitTopLevel(const std::string& s)
    {
        std::vector<std::string> parts;
        int depth = 0;
        std::string cur;
        for (char c : s) {
            if (c == '(' || c == '[')
                ++depth;
            if (c == ')' || c == ']')
                --depth;
            if (c == ',' && depth == 0) {
                parts.push_back(trim(cur));
                cur.clear();
            } else {
                cur += c;
            }
        }
        if (!trim(cur).empty() || !parts.empty())
            parts.push_back(trim(cur));
        return parts;
    }

    // Reads key=(...) or key=token groups from a launch line.
    std::map<std::string, std::string> keyValues(const std::string& s, int line, const std::string& directive)
    {
        std::map<std::string, std::string> kv;
        std::size_t i = 0;
        auto fail = [&](const std::string& what) {
            throw InputError("line " + std::to_string(line) + ": @kl:" + directive + " " + what);
        };
        while (i < s.size()) {
            while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
                ++i;
            if (i >= s.size())
                break;
            const std::size_t eq = s.find('=', i);
            if (eq == std::string::npos)
                fail("expects key=value pairs, got '" + abbreviate(s.substr(i)) + "'");
            const std::string key = trim(s.substr(i, eq - i));
            if (!isIdent(key))
                fail("bad key '" + abbreviate(key) + "'");
            i = eq + 1;
            while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
                ++i;
            std::string value;
            if (i < s.size() && s[i] == '(') {
                int depth = 0;
                const std::size_t start = i;
                for (; i < s.size(); ++i) {
                    if (s[i] == '(')
                        ++depth;
                    else if (s[i] == ')' && --depth == 0)
                        break;
                }
                if (i >= s.size())
                    fail("unbalanced parentheses in " + key);
                value = s.substr(start + 1, i - start - 1);
                ++i;
            } else {
                const std::size_t start = i;
                int depth = 0;
                while (i < s.size() && (depth > 0 || !std::isspace(static_cast<unsigned char>(s[i])))) {
                    if (s[i] == '(')
                        ++depth;
                    if (s[i] == ')')
                        --depth;
                    ++i;
                }
                value = s.substr(start, i - start);
            }
            if (kv.count(key))
                fail("repeats " + key);
            kv[key] = value;
        }
        return kv;
    }

    Expr parseExprAt(const std::string& text, int line, const std::string& what)
    {
        try {
            return Expr::parse(text);
        } catch (const ExprError& e) {
            throw InputError("line " + std::to_string(line) + ": " + what + ": " + e.what());
        }
    }

    void parseDims(const std::string& text, Expr out[3], int line, const std::string& what)
    {
        const auto parts = splitTopLevel(text);
        if (parts.empty() || parts.size() > 3)
            throw InputError("line " + std::to_string(line) + ": " + what + " needs 1 to 3 expressions");
        for (std::size_t d = 0; d < 3; ++d)
            out[d] = parseExprAt(d < parts.size() ? parts[d] : "1", line, what);
    }

    std::int64_t parseInt(const std::string& s, int line)
    {
        try {
            // Decimal, or hex with 0x: a leading zero is not octal ("010" is ten, as a reader expects).
            const std::string t = trim(s);
            const bool hex = t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X');
            std::size_t used = 0;
            const long long v = std::stoll(hex ? t.substr(2) : t, &used, hex ? 16 : 10);
            if (used != t.size() - (hex ? 2 : 0))
                throw std::invalid_argument(s);
            return v;
        } catch (...) {
            throw InputError("line " + std::to_string(line) + ": '" + abbreviate(trim(s)) + "' is not an integer");
        }
    }

    std::string joined(const std::vector<std::string>& names)
    {
        std::string s;
        for (const auto& n : names)
            s += (s.empty() ? "" : ", ") + n;
        return s.empty() ? "none" : s;
    }

    // The source with comments, string and character literals and preprocessor lines blanked (newlines kept),
    // so that only code is searched for a kernel's signature.
    std::string codeOnly(const std::string& src)
    {
        std::string out = src;
        enum class State { Code, Line, Block, String, Char, Directive } st = State::Code;
        bool lineStart = true;
        for (std::size_t i = 0; i < out.size(); ++i) {
            const char c = src[i];
            const char n = i + 1 < src.size() ? src[i + 1] : '\0';
            if (c == '\n') {
                if (st == State::Line || (st == State::Directive && (i == 0 || src[i - 1] != '\\')))
                    st = State::Code;
                lineStart = true;
                continue;
            }
            switch (st) {
            case State::Code:
                if (c == '/' && n == '/')
                    st = State::Line;
                else if (c == '/' && n == '*')
                    st = State::Block;
                else if (c == '"')
                    st = State::String;
                else if (c == '\'')
                    st = State::Char;
                else if (c == '#' && lineStart)
                    st = State::Directive;
                if (st != State::Code)
                    out[i] = ' ';
                break;
            case State::Block:
                out[i] = ' ';
                if (c == '*' && n == '/') {
                    out[++i] = ' ';
                    st = State::Code;
                }
                break;
            case State::String:
            case State::Char:
                if (c == '\\' && n != '\n' && n != '\0') {
                    out[i + 1] = ' ';
                    ++i;
                } else if (c == (st == State::String ? '"' : '\'')) {
                    st = State::Code;
                }
                out[i] = ' ';
                break;
            case State::Line:
            case State::Directive:
                out[i] = ' ';
                break;
            }
            if (!std::isspace(static_cast<unsigned char>(c)))
                lineStart = false;
        }
        return out;
    }

    bool identChar(char c)
    {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    }

    struct Signature {
        std::size_t parameters = 0;
        int line = 0;
    };

    // The parameter count of the __global__ function kernel as the code spells it; nullopt where the code does not
    // (a macro makes the name) or its declarations disagree (overloads).
    std::optional<Signature> kernelSignature(const std::string& code, const std::string& kernel)
    {
        std::optional<Signature> found;
        for (std::size_t pos = code.find(kernel); pos != std::string::npos; pos = code.find(kernel, pos + 1)) {
            const std::size_t end = pos + kernel.size();
            if ((pos > 0 && identChar(code[pos - 1])) || (end < code.size() && identChar(code[end])))
                continue;
            std::size_t open = end;
            while (open < code.size() && std::isspace(static_cast<unsigned char>(code[open])))
                ++open;
            if (open >= code.size() || code[open] != '(')
                continue;
            const std::size_t declStart = code.find_last_of(";{}", pos);
            const std::string prefix = code.substr(declStart == std::string::npos ? 0 : declStart + 1,
                pos - (declStart == std::string::npos ? 0 : declStart + 1));
            bool global = false;
            for (std::size_t g = prefix.find("__global__"); g != std::string::npos;
                 g = prefix.find("__global__", g + 1))
                global
                    |= (g == 0 || !identChar(prefix[g - 1])) && (g + 10 >= prefix.size() || !identChar(prefix[g + 10]));
            if (!global)
                continue;
            int depth = 0;
            std::size_t commas = 0, close = open;
            std::string list;
            for (; close < code.size(); ++close) {
                const char c = code[close];
                if (c == '(' || c == '[' || c == '{' || c == '<')
                    ++depth;
                else if (c == ')' || c == ']' || c == '}' || c == '>')
                    --depth;
                if (depth == 0)
                    break;
                if (close > open)
                    list += c;
                if (c == ',' && depth == 1)
                    ++commas;
            }
            if (close >= code.size())
                return std::nullopt;
            const std::string params = trim(list);
            Signature sig;
            sig.parameters = params.empty() || params == "void" ? 0 : commas + 1;
            sig.line
                = 1 + static_cast<int>(std::count(code.begin(), code.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
            if (found && found->parameters != sig.parameters)
                return std::nullopt;
            if (!found)
                found = sig;
        }
        return found;
    }

    // NAME tensor=T box=(...) [elemstride=(...)] [swizzle=none|32B|64B|128B] [interleave=none|16B|32B]
    // [l2promo=none|64B|128B|256B] [oob=zero|nan]
    TensorMapSpec parseTensorMap(const std::string& rest, int line)
    {
        const std::string where = "line " + std::to_string(line) + ": @kl:tensormap ";
        const auto sp = rest.find_first_of(" \t");
        TensorMapSpec m;
        m.line = line;
        m.name = rest.substr(0, sp);
        if (!isIdent(m.name))
            throw InputError(where + "bad map name '" + abbreviate(m.name) + "'");
        const auto kv = keyValues(sp == std::string::npos ? "" : rest.substr(sp), line, "tensormap " + m.name);
        for (const char* k : { "tensor", "box" })
            if (!kv.count(k))
                throw InputError(where + m.name + " needs " + k + "=");
        m.tensor = kv.at("tensor");
        auto extents = [&](const std::string& key) {
            std::vector<Expr> out;
            const auto parts = splitTopLevel(kv.at(key));
            if (parts.empty() || parts.size() > static_cast<std::size_t>(TensorMapSpec::kMaxRank))
                throw InputError(where + m.name + " " + key + ": needs 1 to 5 expressions, innermost first");
            for (const auto& p : parts)
                out.push_back(parseExprAt(p, line, "@kl:tensormap " + m.name + " " + key));
            return out;
        };
        m.box = extents("box");
        if (kv.count("elemstride"))
            m.elementStrides = extents("elemstride");
        auto choose = [&](const std::string& key, auto& out, const auto& options) {
            if (!kv.count(key))
                return;
            std::string names;
            for (const auto& [text, value] : options) {
                if (kv.at(key) == text) {
                    out = value;
                    return;
                }
                names += (names.empty() ? "" : ", ") + std::string(text);
            }
            throw InputError(where + m.name + " " + key + ": '" + abbreviate(kv.at(key)) + "' is not one of " + names);
        };
        using S = TmaSwizzle;
        using I = TmaInterleave;
        using L = TmaL2Promotion;
        choose("swizzle", m.swizzle,
            std::vector<std::pair<const char*, S>> {
                { "none", S::None }, { "32B", S::B32 }, { "64B", S::B64 }, { "128B", S::B128 } });
        choose("interleave", m.interleave,
            std::vector<std::pair<const char*, I>> { { "none", I::None }, { "16B", I::B16 }, { "32B", I::B32 } });
        choose("l2promo", m.l2Promotion,
            std::vector<std::pair<const char*, L>> {
                { "none", L::None }, { "64B", L::B64 }, { "128B", L::B128 }, { "256B", L::B256 } });
        choose("oob", m.oobFill,
            std::vector<std::pair<const char*, TmaOobFill>> {
                { "zero", TmaOobFill::Zero }, { "nan", TmaOobFill::Nan } });
        for (const auto& [k, v] : kv)
            if (k != "tensor" && k != "box" && k != "elemstride" && k != "swizzle" && k != "interleave"
                && k != "l2promo" && k != "oob")
                throw InputError(where + m.name + ": unknown key '" + abbreviate(k)
                    + "' (tensor, box, elemstride, swizzle, interleave, l2promo, oob)");
        return m;
    }

} // namespace

std::string clusterProblem(const std::int64_t grid[3], const std::int64_t cluster[3])
{
    std::int64_t blocks = 1;
    for (int d = 0; d < 3; ++d) {
        if (cluster[d] < 1)
            return "cluster dimension " + std::to_string(d) + " is " + std::to_string(cluster[d]);
        if (grid[d] % cluster[d] != 0)
            return "grid dimension " + std::to_string(d) + " = " + std::to_string(grid[d])
                + " is not a multiple of the cluster's " + std::to_string(cluster[d]);
        blocks *= cluster[d];
    }
    if (blocks > kMaxClusterBlocks)
        return "a cluster of " + std::to_string(blocks) + " blocks exceeds the portable "
            + std::to_string(kMaxClusterBlocks);
    return {};
}

const TensorMapSpec* KernelSpec::tensorMap(const std::string& name) const
{
    for (const auto& m : tensorMaps)
        if (m.name == name)
            return &m;
    return nullptr;
}

const ParamSpec* KernelSpec::param(const std::string& name) const
{
    for (const auto& p : params)
        if (p.name == name)
            return &p;
    return nullptr;
}

ParamValues KernelSpec::defaults() const
{
    ParamValues v;
    for (const auto& p : params)
        v[p.name] = p.defaultValue;
    return v;
}

Bindings bindingsFor(const ParamValues& params, const Bindings& dims)
{
    Bindings b = dims;
    for (const auto& [k, v] : params)
        b[k] = static_cast<double>(v);
    return b;
}

bool KernelSpec::satisfies(const ParamValues& p, const Bindings& dims, std::string* why) const
{
    const Bindings b = bindingsFor(p, dims);
    for (const auto& c : constraints) {
        bool bound = true;
        for (const auto& id : c.expr.identifiers())
            if (!b.count(id))
                bound = false;
        if (!bound)
            continue;
        bool ok = false;
        try {
            ok = c.expr.evaluateBool(b);
        } catch (const ExprError& e) {
            if (why)
                *why = e.what();
            return false;
        }
        if (!ok) {
            if (why)
                *why = "constraint '" + abbreviate(c.expr.text()) + "' (line " + std::to_string(c.line)
                    + ") does not hold";
            return false;
        }
    }
    return true;
}

void KernelSpec::requireValidParams(const ParamValues& p, const Bindings& dims) const
{
    std::vector<std::string> declared;
    for (const auto& ps : params)
        declared.push_back(ps.name);
    for (const auto& [name, value] : p) {
        const ParamSpec* ps = param(name);
        if (!ps)
            throw InputError(
                "parameter '" + abbreviate(name) + "' is not declared (declared: " + joined(declared) + ")");
        if (std::find(ps->values.begin(), ps->values.end(), value) == ps->values.end()) {
            std::vector<std::string> values;
            for (auto v : ps->values)
                values.push_back(std::to_string(v));
            throw InputError(name + "=" + std::to_string(value) + " is not one of the values declared on line "
                + std::to_string(ps->line) + " [" + joined(values) + "]");
        }
    }
    ParamValues full = defaults();
    for (const auto& [name, value] : p)
        full[name] = value;
    std::string why;
    if (!satisfies(full, dims, &why))
        throw InputError("parameters "
            + abbreviate(
                [&] {
                    std::string s;
                    for (const auto& [k, v] : full)
                        s += (s.empty() ? "" : ",") + k + "=" + std::to_string(v);
                    return s;
                }(),
                200)
            + ": " + why);
}

std::size_t KernelSpec::spaceSize() const
{
    std::size_t n = 1;
    for (const auto& p : params) {
        const std::size_t k = std::max<std::size_t>(1, p.values.size());
        if (n > std::numeric_limits<std::size_t>::max() / k)
            return std::numeric_limits<std::size_t>::max(); // saturates instead of wrapping
        n *= k;
    }
    return n;
}

std::vector<ParamValues> KernelSpec::enumerateSpace(std::size_t limit) const
{
    std::vector<ParamValues> out;
    std::vector<std::size_t> idx(params.size(), 0);
    if (params.empty()) {
        out.push_back({});
        return out;
    }
    for (;;) {
        ParamValues v;
        for (std::size_t i = 0; i < params.size(); ++i)
            v[params[i].name] = params[i].values.empty() ? params[i].defaultValue : params[i].values[idx[i]];
        if (satisfies(v, {}))
            out.push_back(std::move(v));
        if (out.size() >= limit)
            break;
        std::size_t i = 0;
        for (; i < params.size(); ++i) {
            if (++idx[i] < std::max<std::size_t>(1, params[i].values.size()))
                break;
            idx[i] = 0;
        }
        if (i == params.size())
            break;
    }
    return out;
}

KernelSpec parseKernelSpec(const std::string& source)
{
    if (const auto nul = source.find('\0'); nul != std::string::npos)
        throw InputError("line "
            + std::to_string(1 + std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(nul), '\n'))
            + ": a NUL byte: a candidate is text, and the compiler would stop reading there");
    KernelSpec spec;
    spec.language = detectLanguage(source);
    const bool triton = spec.language == KernelLanguage::Triton;
    const std::string commentMark = triton ? "#" : "//";
    std::istringstream lines(source);
    std::string raw;
    int lineNo = 0;
    while (std::getline(lines, raw)) {
        ++lineNo;
        // A directive starts its comment ("// @kl:..."); prose that mentions "@kl:" later in a comment is prose.
        const std::string line = trim(raw);
        if (line.rfind(commentMark, 0) != 0)
            continue;
        const std::string comment = trim(line.substr(commentMark.size()));
        if (comment.rfind("@kl:", 0) != 0)
            continue;
        const std::string body = comment.substr(4);
        const auto sp = body.find_first_of(" \t");
        const std::string directive = body.substr(0, sp);
        const std::string rest = sp == std::string::npos ? "" : trim(body.substr(sp));
        const std::string where = "line " + std::to_string(lineNo) + ": ";
        if (directive == "param") {
            // NAME = DEFAULT in [v1, v2, ...]
            const auto eq = rest.find('=');
            const auto in = rest.find(" in ");
            if (eq == std::string::npos || in == std::string::npos || in < eq)
                throw InputError(where + "@kl:param expects 'NAME = DEFAULT in [v1, v2, ...]'");
            ParamSpec p;
            p.line = lineNo;
            p.name = trim(rest.substr(0, eq));
            if (!isIdent(p.name))
                throw InputError(where + "bad parameter name '" + abbreviate(p.name) + "'");
            if (spec.param(p.name))
                throw InputError(where + "parameter '" + abbreviate(p.name) + "' declared twice");
            if (p.name == kArchIdentifier || p.name == kSmCountIdentifier)
                throw InputError(where + "'" + p.name + "' is built in ("
                    + (p.name == kArchIdentifier ? "the device's compute capability x10"
                                                 : "the device's multiprocessor count")
                    + "), not a parameter");
            p.defaultValue = parseInt(rest.substr(eq + 1, in - eq - 1), lineNo);
            std::string list = trim(rest.substr(in + 4));
            if (list.size() < 2 || list.front() != '[' || list.back() != ']')
                throw InputError(where + "@kl:param values must be a list like [64, 128]");
            for (const auto& v : splitTopLevel(list.substr(1, list.size() - 2)))
                p.values.push_back(parseInt(v, lineNo));
            if (p.values.empty())
                throw InputError(where + "parameter '" + abbreviate(p.name) + "' has no values");
            if (p.values.size() > 4096)
                throw InputError(where + "parameter '" + abbreviate(p.name) + "' has more than 4096 values");
            bool hasDefault = false;
            for (auto v : p.values)
                hasDefault |= v == p.defaultValue;
            if (!hasDefault)
                throw InputError(where + "default of '" + abbreviate(p.name) + "' is not among its values");
            spec.params.push_back(std::move(p));
        } else if (directive == "constraint") {
            if (rest.empty())
                throw InputError(where + "@kl:constraint needs an expression");
            spec.constraints.push_back({ parseExprAt(rest, lineNo, "@kl:constraint"), lineNo });
        } else if (directive == "workspace") {
            // NAME bytes=EXPR [init=zero|poison]
            const auto sp2 = rest.find_first_of(" \t");
            WorkspaceSpec w;
            w.line = lineNo;
            w.name = rest.substr(0, sp2);
            if (!isIdent(w.name))
                throw InputError(where + "bad workspace name '" + abbreviate(w.name) + "'");
            const auto kv = keyValues(sp2 == std::string::npos ? "" : rest.substr(sp2), lineNo, "workspace");
            if (!kv.count("bytes"))
                throw InputError(where + "@kl:workspace needs bytes=EXPR");
            w.bytes = parseExprAt(kv.at("bytes"), lineNo, "workspace bytes");
            if (kv.count("init")) {
                if (kv.at("init") != "zero" && kv.at("init") != "poison")
                    throw InputError(where + "workspace init must be zero or poison");
                w.zeroInit = kv.at("init") == "zero";
            }
            for (const auto& [k, v] : kv)
                if (k != "bytes" && k != "init")
                    throw InputError(where + "unknown workspace key '" + abbreviate(k) + "'");
            spec.workspaces.push_back(std::move(w));
        } else if (directive == "launch") {
            const auto sp2 = rest.find_first_of(" \t");
            LaunchStep s;
            s.line = lineNo;
            s.kernel = rest.substr(0, sp2);
            if (!isIdent(s.kernel))
                throw InputError(where + "bad kernel name '" + abbreviate(s.kernel) + "'");
            const auto kv = keyValues(sp2 == std::string::npos ? "" : rest.substr(sp2), lineNo, "launch");
            for (const char* k : { "grid", "block", "args" })
                if (!kv.count(k) && !(triton && std::string(k) == "block"))
                    throw InputError(where + "@kl:launch needs " + k + "=(...)");
            parseDims(kv.at("grid"), s.grid, lineNo, "grid");
            if (triton) {
                for (const char* k : { "block", "smem" })
                    if (kv.count(k))
                        throw InputError(where + "a Triton @kl:launch takes no " + k
                            + "=: the block is 32 * num_warps and Triton's compiler sizes the shared memory");
                s.numWarps = parseExprAt(kv.count("num_warps") ? kv.at("num_warps") : "4", lineNo, "num_warps");
                s.numStages = parseExprAt(kv.count("num_stages") ? kv.at("num_stages") : "3", lineNo, "num_stages");
                s.block[0] = parseExprAt("32 * (" + s.numWarps.text() + ")", lineNo, "num_warps");
                s.block[1] = s.block[2] = Expr::parse("1");
                s.sharedBytes = Expr::parse("0");
            } else {
                for (const char* k : { "num_warps", "num_stages" })
                    if (kv.count(k))
                        throw InputError(where + k + "= is a Triton launch key; a CUDA launch says block=(...)");
                parseDims(kv.at("block"), s.block, lineNo, "block");
                s.sharedBytes = parseExprAt(kv.count("smem") ? kv.at("smem") : "0", lineNo, "smem");
            }
            for (const auto& a : splitTopLevel(kv.at("args"))) {
                if (!isIdent(a))
                    throw InputError(where + "kernel argument '" + abbreviate(a)
                        + "' must be a tensor, workspace, dim or scalar name");
                s.args.push_back(a);
            }
            if (kv.count("cluster")) {
                parseDims(kv.at("cluster"), s.cluster, lineNo, "cluster");
                s.hasCluster = true;
            } else {
                for (auto& c : s.cluster)
                    c = Expr::parse("1");
            }
            if (kv.count("pdl")) {
                if (kv.at("pdl") != "0" && kv.at("pdl") != "1")
                    throw InputError(where + "@kl:launch pdl must be 0 or 1, not '" + abbreviate(kv.at("pdl")) + "'");
                s.programmaticLaunch = kv.at("pdl") == "1";
                if (s.programmaticLaunch && spec.launches.empty())
                    throw InputError(where
                        + "@kl:launch pdl=1 on the plan's first kernel: programmatic dependent "
                          "launch overlaps a kernel with the plan's previous one, and there is none");
            }
            for (const auto& [k, v] : kv)
                if (k != "grid" && k != "block" && k != "smem" && k != "args" && k != "cluster" && k != "pdl"
                    && k != "num_warps" && k != "num_stages")
                    throw InputError(where + "unknown launch key '" + abbreviate(k)
                        + "' (grid, block, smem, cluster, pdl, args; Triton: num_warps, num_stages)");
            spec.launches.push_back(std::move(s));
        } else if (directive == "tensormap") {
            TensorMapSpec m = parseTensorMap(rest, lineNo);
            if (spec.tensorMap(m.name))
                throw InputError(where + "tensor map '" + m.name + "' declared twice");
            spec.tensorMaps.push_back(std::move(m));
        } else {
            throw InputError(where + "unknown directive '@kl:" + abbreviate(directive)
                + "' (param, constraint, workspace, tensormap, launch)");
        }
    }
    if (spec.launches.empty())
        throw InputError("no '" + commentMark + " @kl:launch' line: the harness needs the launch plan");
    if (triton && spec.launches.size() > 1)
        throw InputError("line " + std::to_string(spec.launches[1].line)
            + ": a Triton candidate launches one @triton.jit kernel (Triton compiles each kernel to its own CUBIN)");
    return spec;
}

KernelSpec parseKernelSpec(const std::string& source, const Problem& problem)
{
    KernelSpec spec = parseKernelSpec(source);
    std::vector<std::string> paramNames, dimNames;
    for (const auto& p : spec.params)
        paramNames.push_back(p.name);
    for (const auto& d : problem.dims)
        dimNames.push_back(d.name);
    auto known = [&](const std::string& id) { return spec.param(id) || problem.dim(id); };
    // ARCH is bound only where constraints are checked against a device (loop_device_limits), not in launches.
    // SM_COUNT is bound in launch grids, clusters and shared memory only (the worker binds it; a persistent grid is
    // sized by it, and a split over a cluster and its blocks' share of an SM may be: gemm_bf16's skinny path).
    auto requireKnown = [&](const Expr& e, int line, const std::string& what, bool archAllowed = false,
                            bool smCountAllowed = false) {
        for (const auto& id : e.identifiers())
            if (!known(id) && !(archAllowed && id == kArchIdentifier) && !(smCountAllowed && id == kSmCountIdentifier))
                throw InputError("line " + std::to_string(line) + ": " + what + " '" + abbreviate(e.text())
                    + "' names '" + abbreviate(id) + "', which is neither a parameter (" + joined(paramNames)
                    + ") nor a dim (" + joined(dimNames) + ") of " + problem.name);
    };
    for (const auto& c : spec.constraints)
        requireKnown(c.expr, c.line, "@kl:constraint", true);
    const Bindings defaults = bindingsFor(spec.defaults(), {});
    for (const auto& c : spec.constraints) {
        const auto ids = c.expr.identifiers();
        if (!std::all_of(ids.begin(), ids.end(), [&](const std::string& id) { return spec.param(id); }))
            continue; // one naming dims may exclude the defaults at some shapes
        std::string why;
        try {
            if (!c.expr.evaluateBool(defaults))
                why = "does not hold";
        } catch (const ExprError& e) {
            why = e.what();
        }
        if (!why.empty())
            throw InputError("line " + std::to_string(c.line) + ": @kl:constraint '" + abbreviate(c.expr.text())
                + "' at the parameters' defaults: " + why);
    }
    for (const auto& w : spec.workspaces)
        requireKnown(w.bytes, w.line, "@kl:workspace " + w.name + " bytes");
    for (const auto& m : spec.tensorMaps) {
        if (!problem.tensor(m.tensor))
            throw InputError("line " + std::to_string(m.line) + ": @kl:tensormap " + m.name + " tensor: '"
                + abbreviate(m.tensor) + "' is not a tensor of " + problem.name);
        if (problem.tensor(m.name) || known(m.name)
            || std::any_of(spec.workspaces.begin(), spec.workspaces.end(),
                [&](const WorkspaceSpec& w) { return w.name == m.name; }))
            throw InputError("line " + std::to_string(m.line) + ": @kl:tensormap " + m.name
                + ": the name is taken by a tensor, workspace, dim or parameter");
        for (const auto& e : m.box)
            requireKnown(e, m.line, "@kl:tensormap " + m.name + " box");
        for (const auto& e : m.elementStrides)
            requireKnown(e, m.line, "@kl:tensormap " + m.name + " elemstride");
    }
    const std::string code = codeOnly(source);
    std::set<std::string> launchesSomewhere; // labels of the shapes at which some launch is made
    for (const auto& l : spec.launches) {
        if (spec.language == KernelLanguage::Triton)
            for (const auto& [e, what] : { std::pair { &l.numWarps, "num_warps" }, { &l.numStages, "num_stages" } }) {
                // Compile-time launch options: parameters only, a value at the defaults, num_warps a power of 2.
                for (const auto& id : e->identifiers())
                    if (!spec.param(id))
                        throw InputError("line " + std::to_string(l.line) + ": @kl:launch " + what + " names '"
                            + abbreviate(id) + "', which is not a parameter (" + joined(paramNames)
                            + "): Triton fixes it at compile time");
                std::int64_t v = 0;
                try {
                    v = e->evaluateInt(defaults);
                } catch (const ExprError& ex) {
                    throw InputError("line " + std::to_string(l.line) + ": @kl:launch " + what + ": " + ex.what());
                }
                const bool warps = std::string(what) == "num_warps";
                if (v < 1 || (warps && (v > 32 || (v & (v - 1)) != 0)))
                    throw InputError("line " + std::to_string(l.line) + ": @kl:launch " + what + " is "
                        + std::to_string(v) + " at the defaults; "
                        + (warps ? "num_warps is a power of 2 in [1, 32]" : "num_stages is at least 1"));
            }
        for (int d = 0; d < 3; ++d) {
            requireKnown(l.grid[d], l.line, "@kl:launch grid", false, true);
            requireKnown(l.block[d], l.line, "@kl:launch block");
            requireKnown(l.cluster[d], l.line, "@kl:launch cluster", false, true);
        }
        requireKnown(l.sharedBytes, l.line, "@kl:launch smem", false, true);
        for (const auto& a : l.args) {
            const bool scalar = std::any_of(
                problem.scalars.begin(), problem.scalars.end(), [&](const ScalarSpec& s) { return s.name == a; });
            const bool workspace = std::any_of(
                spec.workspaces.begin(), spec.workspaces.end(), [&](const WorkspaceSpec& w) { return w.name == a; });
            if (!known(a) && !scalar && !workspace && !problem.tensor(a) && !spec.tensorMap(a))
                throw InputError("line " + std::to_string(l.line) + ": @kl:launch argument '" + abbreviate(a)
                    + "' is not a tensor, workspace, tensor map, dim, scalar or parameter of " + problem.name);
        }
        // The defaults are what is compiled and measured first: the geometry must be a launch at every shape
        // (SM_COUNT at its least, 1), and each tensor map encodable.
        for (const auto* shapes : { &problem.tuningShapes, &problem.verifyShapes })
            for (const auto& shape : *shapes) {
                Bindings b = bindingsFor(spec.defaults(), shape.bindings());
                for (const auto& m : spec.tensorMaps)
                    try {
                        resolveTensorMap(m, problem, b);
                    } catch (const InputError& e) {
                        throw InputError(std::string(e.what()) + " (at " + shape.label() + " with the defaults)");
                    }
                b[kSmCountIdentifier] = 1;
                std::int64_t grid[3] = { 1, 1, 1 }, cluster[3] = { 1, 1, 1 };
                bool made = true;
                for (const auto& [exprs, what] : { std::pair { l.grid, "grid" }, std::pair { l.block, "block" },
                         std::pair { l.cluster, "cluster" } })
                    for (int d = 0; d < 3; ++d) {
                        std::int64_t v = 0;
                        try {
                            v = exprs[d].evaluateInt(b);
                        } catch (const ExprError& e) {
                            throw InputError("line " + std::to_string(l.line) + ": @kl:launch " + what + " at "
                                + shape.label() + " with the defaults: " + e.what());
                        }
                        // A grid of 0 skips the launch (kernels/HARNESS.md); blocks and clusters need at least 1.
                        const bool isGrid = exprs == l.grid;
                        if (v < (isGrid ? 0 : 1))
                            throw InputError("line " + std::to_string(l.line) + ": @kl:launch " + what + " '"
                                + abbreviate(exprs[d].text()) + "' is " + std::to_string(v) + " at " + shape.label()
                                + " with the defaults; a launch needs at least " + (isGrid ? "0" : "1"));
                        made = made && !(isGrid && v == 0);
                        if (exprs == l.cluster)
                            cluster[d] = v;
                        else if (exprs == l.grid)
                            grid[d] = v;
                    }
                if (!made)
                    continue; // not launched at this shape: no cluster shape to meet
                launchesSomewhere.insert(shape.label());
                // A grid or cluster sized by SM_COUNT meets its cluster shape on a device only (kernels/worker checks
                // it).
                for (int d = 0; d < 3; ++d)
                    if (std::ranges::count(l.grid[d].identifiers(), std::string(kSmCountIdentifier))
                        || std::ranges::count(l.cluster[d].identifiers(), std::string(kSmCountIdentifier)))
                        grid[d] = cluster[d];
                if (const std::string why = clusterProblem(grid, cluster); !why.empty())
                    throw InputError("line " + std::to_string(l.line) + ": @kl:launch cluster at " + shape.label()
                        + " with the defaults: " + why);
            }
        // Triton's parameter list (constexprs among it) is checked by the Triton compile helper.
        if (const auto sig = spec.language == KernelLanguage::Cuda ? kernelSignature(code, l.kernel) : std::nullopt;
            sig && sig->parameters != l.args.size())
            throw InputError("line " + std::to_string(l.line) + ": @kl:launch passes " + std::to_string(l.args.size())
                + " arguments to " + l.kernel + ", whose parameter list (line " + std::to_string(sig->line)
                + ") declares " + std::to_string(sig->parameters));
    }
    for (const auto* shapes : { &problem.tuningShapes, &problem.verifyShapes })
        for (const auto& shape : *shapes)
            if (!spec.launches.empty() && !launchesSomewhere.count(shape.label()))
                throw InputError("line " + std::to_string(spec.launches.front().line)
                    + ": @kl:launch: every launch has a grid of 0 at " + shape.label()
                    + " with the defaults, so the plan launches nothing there");
    return spec;
}

const char* languageName(KernelLanguage l)
{
    return l == KernelLanguage::Triton ? "triton" : "cuda";
}

std::optional<KernelLanguage> languageFromName(const std::string& name)
{
    if (name == "cuda")
        return KernelLanguage::Cuda;
    if (name == "triton")
        return KernelLanguage::Triton;
    return std::nullopt;
}

KernelLanguage detectLanguage(const std::string& source)
{
    std::istringstream lines(source);
    std::string raw;
    while (std::getline(lines, raw)) {
        const std::string line = trim(raw);
        if (line.rfind("@triton.jit", 0) == 0 && (line.size() == 11 || !identChar(line[11])))
            return KernelLanguage::Triton;
    }
    return KernelLanguage::Cuda;
}

std::optional<KernelLanguage> languageOfFileName(const std::string& path)
{
    const auto ends = [&](const std::string& ext) {
        return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
    };
    if (ends(".py"))
        return KernelLanguage::Triton;
    if (ends(".cu") || ends(".cuh"))
        return KernelLanguage::Cuda;
    return std::nullopt;
}

void requireLanguage(const std::string& source, KernelLanguage declared, const std::string& where)
{
    const KernelLanguage found = detectLanguage(source);
    if (found == declared)
        return;
    throw InputError(where + ": declared " + languageName(declared) + " but the source is "
        + (found == KernelLanguage::Triton ? "Triton (a line starts with @triton.jit)"
                                           : "not Triton (no line starts with @triton.jit), so CUDA C++")
        + "; say --language " + languageName(found) + " or pass the other file");
}

void useTemplateFor(Problem& p, KernelLanguage language)
{
    if (language == KernelLanguage::Cuda)
        return;
    if (p.tritonTemplateFile.empty())
        throw InputError("problem " + p.name + " (" + p.folder
            + "/problem.json) has no \"triton_template\": there is no Triton template to start from");
    p.templateFile = p.tritonTemplateFile;
    p.archTemplates.clear(); // the CUDA templates for newer architectures are not Triton's
}

std::string bakeParameters(const std::string& source, const ParamValues& params)
{
    if (detectLanguage(source) == KernelLanguage::Triton) {
        std::string values;
        for (const auto& [k, v] : params)
            values += (values.empty() ? "" : ", ") + k + "=" + std::to_string(v);
        return "# Parameters chosen by KernelLoop (tl.constexpr arguments): " + values + "\n" + source;
    }
    std::string defines = "// Parameters chosen by KernelLoop\n";
    for (const auto& [k, v] : params)
        defines += "#define " + k + " " + std::to_string(v) + "\n";
    return defines + source;
}

} // namespace kl
