#include "core/kernel_spec.h"

#include "core/errors.h"

#include <cctype>
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
    std::map<std::string, std::string> keyValues(const std::string& s, int line)
    {
        std::map<std::string, std::string> kv;
        std::size_t i = 0;
        auto fail = [&](const std::string& what) {
            throw InputError("line " + std::to_string(line) + ": @kl:launch " + what);
        };
        while (i < s.size()) {
            while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
                ++i;
            if (i >= s.size())
                break;
            const std::size_t eq = s.find('=', i);
            if (eq == std::string::npos)
                fail("expects key=value pairs, got '" + s.substr(i) + "'");
            const std::string key = trim(s.substr(i, eq - i));
            if (!isIdent(key))
                fail("bad key '" + key + "'");
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
            std::size_t used = 0;
            const long long v = std::stoll(trim(s), &used, 0);
            if (used != trim(s).size())
                throw std::invalid_argument(s);
            return v;
        } catch (...) {
            throw InputError("line " + std::to_string(line) + ": '" + trim(s) + "' is not an integer");
        }
    }

} // namespace

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
                *why = "constraint '" + c.expr.text() + "' (line " + std::to_string(c.line) + ") does not hold";
            return false;
        }
    }
    return true;
}

std::size_t KernelSpec::spaceSize() const
{
    std::size_t n = 1;
    for (const auto& p : params)
        n *= std::max<std::size_t>(1, p.values.size());
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
    KernelSpec spec;
    std::istringstream lines(source);
    std::string raw;
    int lineNo = 0;
    while (std::getline(lines, raw)) {
        ++lineNo;
        const std::string line = trim(raw);
        const auto at = line.find("@kl:");
        if (line.rfind("//", 0) != 0 || at == std::string::npos)
            continue;
        const std::string body = line.substr(at + 4);
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
                throw InputError(where + "bad parameter name '" + p.name + "'");
            if (spec.param(p.name))
                throw InputError(where + "parameter '" + p.name + "' declared twice");
            if (p.name == kArchIdentifier)
                throw InputError(
                    where + "'" + p.name + "' is built in (the device's compute capability x10), not a parameter");
            p.defaultValue = parseInt(rest.substr(eq + 1, in - eq - 1), lineNo);
            std::string list = trim(rest.substr(in + 4));
            if (list.size() < 2 || list.front() != '[' || list.back() != ']')
                throw InputError(where + "@kl:param values must be a list like [64, 128]");
            for (const auto& v : splitTopLevel(list.substr(1, list.size() - 2)))
                p.values.push_back(parseInt(v, lineNo));
            if (p.values.empty())
                throw InputError(where + "parameter '" + p.name + "' has no values");
            if (p.values.size() > 4096)
                throw InputError(where + "parameter '" + p.name + "' has more than 4096 values");
            bool hasDefault = false;
            for (auto v : p.values)
                hasDefault |= v == p.defaultValue;
            if (!hasDefault)
                throw InputError(where + "default of '" + p.name + "' is not among its values");
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
                throw InputError(where + "bad workspace name '" + w.name + "'");
            const auto kv = keyValues(sp2 == std::string::npos ? "" : rest.substr(sp2), lineNo);
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
                    throw InputError(where + "unknown workspace key '" + k + "'");
            spec.workspaces.push_back(std::move(w));
        } else if (directive == "launch") {
            const auto sp2 = rest.find_first_of(" \t");
            LaunchStep s;
            s.line = lineNo;
            s.kernel = rest.substr(0, sp2);
            if (!isIdent(s.kernel))
                throw InputError(where + "bad kernel name '" + s.kernel + "'");
            const auto kv = keyValues(sp2 == std::string::npos ? "" : rest.substr(sp2), lineNo);
            for (const char* k : { "grid", "block", "args" })
                if (!kv.count(k))
                    throw InputError(where + "@kl:launch needs " + k + "=(...)");
            parseDims(kv.at("grid"), s.grid, lineNo, "grid");
            parseDims(kv.at("block"), s.block, lineNo, "block");
            s.sharedBytes = parseExprAt(kv.count("smem") ? kv.at("smem") : "0", lineNo, "smem");
            for (const auto& a : splitTopLevel(kv.at("args"))) {
                if (!isIdent(a))
                    throw InputError(
                        where + "kernel argument '" + a + "' must be a tensor, workspace, dim or scalar name");
                s.args.push_back(a);
            }
            for (const auto& [k, v] : kv)
                if (k != "grid" && k != "block" && k != "smem" && k != "args")
                    throw InputError(where + "unknown launch key '" + k + "'");
            spec.launches.push_back(std::move(s));
        } else {
            throw InputError(
                where + "unknown directive '@kl:" + directive + "' (param, constraint, workspace, launch)");
        }
    }
    if (spec.launches.empty())
        throw InputError("no '// @kl:launch' line: the harness needs the launch plan");
    return spec;
}

std::string bakeParameters(const std::string& source, const ParamValues& params)
{
    std::string defines = "// Parameters chosen by KernelLoop\n";
    for (const auto& [k, v] : params)
        defines += "#define " + k + " " + std::to_string(v) + "\n";
    return defines + source;
}

} // namespace kl
