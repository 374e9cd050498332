// Static rules for Triton candidates (checkSource dispatches here when detectLanguage says Triton). A first net
// on the source, with the same rule ids as the CUDA rules; the PTX Triton produced is judged by checkPtx as any
// candidate's. Comments and string literals never trigger identifier rules; strings are read only for inline PTX.
#include "core/kernel_spec.h"
#include "kernels/referee/referee.h"
#include "kernels/referee/static_rules.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace kl::referee {

namespace {

    enum class PyKind { Name, Number, String, Punct, Newline };

    struct PyToken {
        PyKind kind = PyKind::Punct;
        std::string text;
        int line = 0;
        int column = 0; // of the token's first character in its line
        bool lineStart = false; // first token of a logical line
    };

    // Logical lines end at a newline outside brackets; comments vanish; a string (any quoting, prefixes, triple
    // quotes) is one token holding its contents.
    std::vector<PyToken> tokenizePython(const std::string& s)
    {
        std::vector<PyToken> out;
        int line = 1, depth = 0;
        std::size_t lineBegin = 0;
        bool atLogicalStart = true;
        auto push = [&](PyKind k, std::string text, int tokLine, std::size_t pos) {
            out.push_back({ k, std::move(text), tokLine, static_cast<int>(pos - lineBegin), atLogicalStart });
            atLogicalStart = false;
        };
        for (std::size_t i = 0; i < s.size();) {
            const char c = s[i];
            if (c == '\n') {
                if (depth == 0 && !atLogicalStart) {
                    out.push_back({ PyKind::Newline, "", line, 0, false });
                    atLogicalStart = true;
                }
                ++line;
                lineBegin = ++i;
                continue;
            }
            if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
                ++line;
                i += 2;
                lineBegin = i;
                continue;
            }
            if (std::isspace(static_cast<unsigned char>(c))) {
                ++i;
                continue;
            }
            if (c == '#') {
                while (i < s.size() && s[i] != '\n')
                    ++i;
                continue;
            }
            // A string, with its prefix letters (r, b, f, u): i is at a token start, so letters here begin a name.
            std::size_t q = i;
            while (q < s.size() && q - i < 2 && std::strchr("rRbBfFuU", s[q]))
                ++q;
            if (q < s.size() && (s[q] == '"' || s[q] == '\'')) {
                {
                    const char quote = s[q];
                    const bool triple = q + 2 < s.size() && s[q + 1] == quote && s[q + 2] == quote;
                    const std::string close(triple ? 3 : 1, quote);
                    const int startLine = line;
                    const std::size_t start = i;
                    std::size_t k = q + close.size();
                    std::string text;
                    while (k < s.size() && s.compare(k, close.size(), close) != 0) {
                        if (s[k] == '\\' && k + 1 < s.size()) {
                            text += s[k];
                            ++k;
                        }
                        if (s[k] == '\n') {
                            ++line;
                            if (!triple)
                                break;
                        }
                        text += s[k];
                        ++k;
                    }
                    i = std::min(s.size(), k + close.size());
                    push(PyKind::String, text, startLine, start);
                    continue;
                }
            }
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                std::size_t k = i;
                while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '_'))
                    ++k;
                push(PyKind::Name, s.substr(i, k - i), line, i);
                i = k;
                continue;
            }
            if (std::isdigit(static_cast<unsigned char>(c))) {
                std::size_t k = i;
                while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '_' || s[k] == '.'))
                    ++k;
                push(PyKind::Number, s.substr(i, k - i), line, i);
                i = k;
                continue;
            }
            static const char* twoChar[] = { "==", "!=", "<=", ">=", "->", "**", "//", "<<", ">>", ":=" };
            std::string p(1, c);
            for (const char* t : twoChar)
                if (s.compare(i, 2, t) == 0)
                    p = t;
            if (p == "(" || p == "[" || p == "{")
                ++depth;
            if ((p == ")" || p == "]" || p == "}") && depth > 0)
                --depth;
            push(PyKind::Punct, p, line, i);
            i += p.size();
        }
        return out;
    }

    std::optional<long long> intLiteral(const std::string& t)
    {
        try {
            std::size_t used = 0;
            const long long v = std::stoll(t, &used, 0);
            if (used == t.size())
                return v;
        } catch (const std::exception&) {
        }
        return std::nullopt;
    }

    class TritonChecker {
    public:
        TritonChecker(const std::string& source, const Problem& problem)
            : m_source(source)
            , m_problem(problem)
            , m_tokens(tokenizePython(source))
        {
        }

        std::vector<VerdictReason> run()
        {
            structure();
            names();
            strings();
            shapeSpecialCases();
            return std::move(m_found).byLine();
        }

    private:
        void add(const char* rule, std::string message, int line) { m_found.add(rule, std::move(message), line); }

        // The text of the logical line starting at token i, up to its Newline (dotted names joined).
        std::size_t lineEnd(std::size_t i) const
        {
            while (i < m_tokens.size() && m_tokens[i].kind != PyKind::Newline)
                ++i;
            return i;
        }

        std::string dotted(std::size_t& i, std::size_t end) const
        {
            std::string name;
            while (i < end && m_tokens[i].kind == PyKind::Name) {
                name += m_tokens[i].text;
                if (i + 1 < end && m_tokens[i + 1].text == ".") {
                    name += ".";
                    i += 2;
                } else {
                    ++i;
                    break;
                }
            }
            return name;
        }

        // Module level: imports of triton / triton.language, @triton.jit decorators and the defs they decorate.
        void structure()
        {
            static const std::set<std::string> allowed = { "triton", "triton.language" };
            bool decorated = false;
            for (std::size_t i = 0; i < m_tokens.size(); i = lineEnd(i) + 1) {
                const PyToken& t = m_tokens[i];
                if (!t.lineStart || t.column != 0)
                    continue; // inside a def's body
                const std::size_t end = lineEnd(i);
                if (t.kind == PyKind::String && end == i + 1)
                    continue; // a docstring
                if (t.text == "import") {
                    for (std::size_t k = i + 1; k < end;) {
                        const std::string mod = dotted(k, end);
                        if (!allowed.count(mod))
                            add(rule::Include,
                                "imports " + (mod.empty() ? std::string("something") : mod)
                                    + ": a Triton candidate imports only triton and triton.language",
                                t.line);
                        while (k < end && m_tokens[k].text != ",")
                            ++k;
                        ++k;
                    }
                    continue;
                }
                if (t.text == "from") {
                    std::size_t k = i + 1;
                    const std::string mod = dotted(k, end);
                    bool ok = k < end && m_tokens[k].text == "import" && allowed.count(mod);
                    if (ok && mod == "triton")
                        for (std::size_t n = k + 1; n < end; ++n)
                            if (m_tokens[n].kind == PyKind::Name && m_tokens[n].text != "as"
                                && m_tokens[n - 1].text != "as" && m_tokens[n].text != "language")
                                ok = false;
                    if (!ok)
                        add(rule::Include,
                            "'from " + mod + " import ...': a Triton candidate imports only triton and triton.language",
                            t.line);
                    continue;
                }
                if (t.text == "@") {
                    std::size_t k = i + 1;
                    const std::string deco = dotted(k, end);
                    if (deco != "triton.jit" || k != end)
                        add(rule::HostCode,
                            "decorator @" + deco
                                + ": only @triton.jit (autotune and heuristics are host code; declare @kl:param "
                                  "values and the built-in tuner searches them)",
                            t.line);
                    decorated = true;
                    continue;
                }
                if (t.text == "def") {
                    if (!decorated)
                        add(rule::HostCode,
                            "def " + (i + 1 < end ? m_tokens[i + 1].text : std::string())
                                + " is host code: every function of a Triton candidate is @triton.jit",
                            t.line);
                    decorated = false;
                    continue;
                }
                decorated = false;
                const bool assignment = std::any_of(m_tokens.begin() + static_cast<std::ptrdiff_t>(i),
                    m_tokens.begin() + static_cast<std::ptrdiff_t>(end),
                    [](const PyToken& x) { return x.kind == PyKind::Punct && (x.text == "=" || x.text == ":="); });
                if (assignment)
                    add(rule::MutableGlobal,
                        "module-level assignment to " + t.text
                            + ": module state (a global) is shared by every launch; pass values as @kl:param "
                              "constexprs",
                        t.line);
                else
                    add(rule::HostCode,
                        "module-level statement '" + t.text
                            + "': a Triton candidate holds imports and @triton.jit kernels only (no host code)",
                        t.line);
            }
        }

        void names()
        {
            static const std::set<std::string> printing = { "print", "device_print", "static_print" };
            static const std::set<std::string> timers
                = { "globaltimer", "globaltimer_lo", "globaltimer_hi", "clock", "clock64", "perf_counter" };
            static const std::set<std::string> host
                = { "torch", "os", "sys", "subprocess", "open", "exec", "eval", "globals", "locals", "vars", "getattr",
                      "setattr", "delattr", "__import__", "__builtins__", "ctypes", "importlib", "input" };
            static const std::set<std::string> fp8
                = { "float8e4nv", "float8e5", "float8e4b15", "float8e4b8", "float8e5b16" };
            const auto has = [&](DType d) {
                return std::any_of(m_problem.tensors.begin(), m_problem.tensors.end(),
                    [&](const TensorSpec& t) { return t.dtype == d; });
            };
            for (std::size_t i = 0; i < m_tokens.size(); ++i) {
                const PyToken& t = m_tokens[i];
                if (t.kind != PyKind::Name)
                    continue;
                const bool attribute = i > 0 && m_tokens[i - 1].text == ".";
                if (printing.count(t.text))
                    add(rule::Printf, t.text + ": device printing is an output channel the harness does not own",
                        t.line);
                else if (t.text == "device_assert")
                    add(rule::EarlyExit, "tl.device_assert ends the grid with a trap outside normal control flow",
                        t.line);
                else if (timers.count(t.text))
                    add(rule::TimerRead,
                        t.text + ": reads a clock (a kernel that times itself can tell checking from timing)", t.line);
                else if (t.text == "global" || t.text == "nonlocal")
                    add(rule::MutableGlobal, "'" + t.text + "' statement: module state shared between launches",
                        t.line);
                else if (host.count(t.text) && !attribute)
                    add(rule::HostCode, t.text + " is host-side Python, not Triton device code", t.line);
                else if (fp8.count(t.text) && !has(DType::FP8E4M3))
                    add(rule::LowerPrecision, "tl." + t.text + ": an 8-bit float the problem's tensors do not have",
                        t.line);
                else if (t.text == "float16" && !has(DType::F16))
                    add(rule::LowerPrecision, "tl.float16: a 16-bit float the problem's tensors do not have", t.line);
                else if (t.text == "bfloat16" && !has(DType::BF16))
                    add(rule::LowerPrecision, "tl.bfloat16: a 16-bit float the problem's tensors do not have", t.line);
            }
        }

        // Inline PTX (tl.inline_asm_elementwise) reading a timer; the PTX rules see the compiled result as well.
        void strings()
        {
            for (const auto& t : m_tokens)
                if (t.kind == PyKind::String)
                    for (const char* reg : { "%globaltimer", "%clock" })
                        if (t.text.find(reg) != std::string::npos)
                            add(rule::TimerRead, std::string("inline PTX reads ") + reg, t.line);
        }

        // Parameters of the launched @triton.jit function that receive a problem dim (the launch line's args, in
        // order), plus the dims' own names: a comparison of one with a literal above 1 picks exact shapes.
        std::set<std::string> shapeNames() const
        {
            std::set<std::string> names;
            for (const auto& d : m_problem.dims)
                names.insert(d.name);
            KernelSpec spec;
            try {
                spec = parseKernelSpec(m_source);
            } catch (const std::exception&) {
                return names;
            }
            for (const auto& l : spec.launches)
                for (std::size_t i = 0; i + 2 < m_tokens.size(); ++i) {
                    if (m_tokens[i].text != "def" || m_tokens[i + 1].text != l.kernel || m_tokens[i + 2].text != "(")
                        continue;
                    std::size_t arg = 0;
                    int depth = 0;
                    bool expectName = true;
                    for (std::size_t k = i + 3; k < m_tokens.size(); ++k) {
                        const std::string& x = m_tokens[k].text;
                        if (x == "(" || x == "[")
                            ++depth;
                        else if ((x == ")" || x == "]") && depth-- == 0)
                            break;
                        else if (x == "," && depth == 0) {
                            ++arg;
                            expectName = true;
                        } else if (expectName && m_tokens[k].kind == PyKind::Name) {
                            if (arg < l.args.size() && m_problem.dim(l.args[arg]))
                                names.insert(x);
                            expectName = false;
                        }
                    }
                }
            return names;
        }

        void shapeSpecialCases()
        {
            const auto names = shapeNames();
            for (std::size_t i = 1; i + 1 < m_tokens.size(); ++i) {
                const PyToken& op = m_tokens[i];
                if (op.kind != PyKind::Punct || (op.text != "==" && op.text != "!="))
                    continue;
                const PyToken& a = m_tokens[i - 1];
                const PyToken& b = m_tokens[i + 1];
                const PyToken* name = a.kind == PyKind::Name && names.count(a.text) ? &a
                    : b.kind == PyKind::Name && names.count(b.text)                 ? &b
                                                                                    : nullptr;
                const PyToken& other = name == &a ? b : a;
                if (!name || other.kind != PyKind::Number)
                    continue;
                // A dotted or indexed operand (x.T, T[0]) is not the bare shape name.
                if ((name == &a && i >= 2 && m_tokens[i - 2].text == ".")
                    || (name == &b && i + 2 < m_tokens.size()
                        && (m_tokens[i + 2].text == "." || m_tokens[i + 2].text == "[")))
                    continue;
                const auto literal = intLiteral(other.text);
                if (!literal || *literal <= 1)
                    continue;
                add(rule::ShapeSpecialCase,
                    "compares " + name->text + " " + op.text + " " + std::to_string(*literal)
                        + ": a branch on one exact shape (special-casing a tuned shape). Flagged for review; if both "
                          "paths do the full work, express the specialization as a @kl:param instead",
                    op.line);
            }
        }

        const std::string& m_source;
        const Problem& m_problem;
        std::vector<PyToken> m_tokens;
        Findings m_found;
    };

} // namespace

std::vector<VerdictReason> checkTritonSource(const std::string& source, const Problem& problem)
{
    return TritonChecker(source, problem).run();
}

} // namespace kl::referee
