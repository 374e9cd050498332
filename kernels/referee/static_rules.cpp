// Static rules over the token stream of a candidate. Each rule is a small function that appends reasons;
// checkSource runs them all. Identifier rules only see Identifier tokens, so comments and string contents
// never trigger them; string literals are read only as inline PTX.
#include "core/kernel_spec.h"
#include "kernels/referee/precision.h"
#include "kernels/referee/referee.h"
#include "kernels/referee/source_tokens.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <set>
#include <string_view>

namespace kl::referee {
namespace {

    bool isIdent(const Token& t, std::string_view s)
    {
        return t.kind == TokenKind::Identifier && t.text == s;
    }
    bool isPunct(const Token& t, std::string_view s)
    {
        return t.kind == TokenKind::Punct && t.text == s;
    }
    bool startsWith(std::string_view s, std::string_view p)
    {
        return s.substr(0, p.size()) == p;
    }
    bool contains(std::string_view s, std::string_view p)
    {
        return s.find(p) != std::string_view::npos;
    }

    std::optional<std::int64_t> integerLiteral(const Token& t)
    {
        if (t.kind != TokenKind::Number)
            return std::nullopt;
        std::string digits = t.text;
        while (!digits.empty()
            && (digits.back() == 'u' || digits.back() == 'U' || digits.back() == 'l' || digits.back() == 'L'))
            digits.pop_back();
        int base = 10;
        std::size_t start = 0;
        if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
            base = 16;
            start = 2;
        } else if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'b' || digits[1] == 'B')) {
            base = 2;
            start = 2;
        } else if (digits.size() > 1 && digits[0] == '0') {
            base = 8;
            start = 1;
        }
        std::int64_t value = 0;
        const char* first = digits.data() + start;
        const char* last = digits.data() + digits.size();
        const auto [ptr, ec] = std::from_chars(first, last, value, base);
        if (ec != std::errc() || ptr != last)
            return std::nullopt;
        return value;
    }

    class Checker {
    public:
        Checker(const std::string& source, const Problem& problem)
            : m_all(tokenize(source))
            , m_problem(problem)
        {
            std::vector<Token> raw;
            bool inDirective = false;
            for (std::size_t i = 0; i < m_all.size(); ++i) {
                const Token& t = m_all[i];
                if (t.kind == TokenKind::Directive) {
                    inDirective = true;
                    if (t.text == "define")
                        defineMacro(i + 1);
                } else if (t.kind == TokenKind::DirectiveEnd) {
                    inDirective = false;
                } else if (!inDirective) {
                    raw.push_back(t);
                }
            }
            // Structural rules read the code with macros expanded, so "#define DEV __device__" or
            // "#define LIMIT 4096" hide nothing. Token pasting is rejected on its own, so expansion never has
            // to build new identifiers.
            std::vector<std::string> active;
            m_code = expand(raw, active);
            if (m_expansionBudget < 0)
                add(rule::MacroExpansion,
                    "macros expand to more than " + std::to_string(kExpansionTokens)
                        + " tokens (a macro bomb); write the code out",
                    m_bombLine);
        }

        std::vector<VerdictReason> run()
        {
            includes();
            tokenPaste();
            identifierRules();
            inlinePtx();
            hostLaunchSyntax();
            mutableGlobals();
            constCastGlobals();
            sixteenBitOperators();
            shapeSpecialCases();
            std::stable_sort(m_out.begin(), m_out.end(),
                [](const VerdictReason& a, const VerdictReason& b) { return a.line < b.line; });
            return std::move(m_out);
        }

    private:
        void add(const char* rule, std::string message, int line)
        {
            if (!m_seen.insert({ rule, line }).second)
                return;
            const RuleInfo* info = findRule(rule);
            m_out.push_back({ rule, std::move(message), line, info ? info->blocking : true });
        }

        // ---- static.include, static.token-paste ------------------------------------------------------------
        void includes()
        {
            for (std::size_t i = 0; i < m_all.size(); ++i) {
                const Token& t = m_all[i];
                if (t.kind != TokenKind::Directive)
                    continue;
                if (t.text == "include" || t.text == "include_next" || t.text == "import") {
                    const bool named = i + 1 < m_all.size() && m_all[i + 1].kind == TokenKind::HeaderName;
                    if (!named) {
                        add(rule::Include,
                            "#" + t.text + " without a literal header name; only CUDA's device headers may be included",
                            t.line);
                    } else if (!includeAllowed(m_all[i + 1].text)) {
                        add(rule::Include,
                            "#include <" + m_all[i + 1].text
                                + "> is not on the allow-list (CUDA fp16/bf16/fp8 headers, cooperative_groups, cub/, "
                                  "cute/, cutlass/, "
                                  "cuda/, "
                                  "mma.h, cuda_pipeline.h); candidates are self-contained device code",
                            t.line);
                    }
                }
            }
        }

        void tokenPaste()
        {
            bool inDirective = false;
            for (const Token& t : m_all) {
                if (t.kind == TokenKind::Directive)
                    inDirective = true;
                else if (t.kind == TokenKind::DirectiveEnd)
                    inDirective = false;
                else if (inDirective && isPunct(t, "##"))
                    add(rule::TokenPaste,
                        "token pasting (##) builds identifiers the referee cannot read; write names out", t.line);
            }
        }

        // ---- identifier rules: timers, early exit, host code, printf, lower precision --------------------------
        bool hasTag(const char* tag) const { return problemHasTag(m_problem, tag); }

        using Family = PrecisionFamily;

        static Family familyOfIdentifier(std::string_view s)
        {
            if (contains(s, "tf32"))
                return Family::TF32;
            if (contains(s, "fp4") || contains(s, "fp6") || contains(s, "e2m1") || contains(s, "e2m3")
                || contains(s, "e3m2"))
                return Family::FP4_6;
            if (contains(s, "fp8") || contains(s, "e4m3") || contains(s, "e5m2"))
                return Family::FP8;
            if (contains(s, "bfloat16") || contains(s, "bf16"))
                return Family::BF16;
            if (startsWith(s, "__") && contains(s, "half"))
                return Family::F16;
            return Family::None;
        }

        bool familyAllowed(Family f) const { return precisionFamilyAllowed(f, m_problem); }
        static const char* familyName(Family f) { return precisionFamilyName(f); }
        std::string problemDtypeList() const { return referee::problemDtypeList(m_problem); }

        // "half"/"half2" are also common variable names; count them only where a type goes.
        bool halfUsedAsType(std::size_t i) const
        {
            if (i + 1 >= m_code.size())
                return false;
            const Token& next = m_code[i + 1];
            if (next.kind == TokenKind::Identifier || isPunct(next, ")") || isPunct(next, ">") || isPunct(next, "::"))
                return true;
            if ((isPunct(next, "*") || isPunct(next, "&")) && i + 2 < m_code.size()) {
                const Token& after = m_code[i + 2];
                return after.kind == TokenKind::Identifier || isPunct(after, "*") || isPunct(after, ")")
                    || isPunct(after, ">") || isPunct(after, ",");
            }
            return false;
        }

        static bool isHalfArithmetic(std::string_view s)
        {
            static const std::set<std::string, std::less<>> names = {
                "__hadd",
                "__hsub",
                "__hmul",
                "__hfma",
                "__hdiv",
                "__hadd2",
                "__hsub2",
                "__hmul2",
                "__hfma2",
                "__h2div",
                "__hadd_sat",
                "__hsub_sat",
                "__hmul_sat",
                "__hfma_sat",
                "__hadd2_sat",
                "__hsub2_sat",
                "__hmul2_sat",
                "__hfma2_sat",
                "__hadd_rn",
                "__hsub_rn",
                "__hmul_rn",
                "__hadd2_rn",
                "__hsub2_rn",
                "__hmul2_rn",
                "__hfma_relu",
                "__hfma2_relu",
                "__hcmadd",
                "hexp",
                "hexp2",
                "hexp10",
                "hlog",
                "hlog2",
                "hlog10",
                "hsqrt",
                "hrsqrt",
                "hrcp",
                "hsin",
                "hcos",
                "htanh",
                "htanh_approx",
                "h2exp",
                "h2exp2",
                "h2exp10",
                "h2log",
                "h2log2",
                "h2log10",
                "h2sqrt",
                "h2rsqrt",
                "h2rcp",
                "h2sin",
                "h2cos",
                "h2tanh",
                "h2tanh_approx",
            };
            return names.count(s) > 0;
        }

        void identifierRules()
        {
            // Identifiers in #define bodies count too: a macro is code.
            std::vector<const Token*> idents;
            for (const Token& t : m_all)
                if (t.kind == TokenKind::Identifier)
                    idents.push_back(&t);
            const bool halfMathOk = hasTag(kAllowHalfMathTag);
            for (std::size_t k = 0; k < idents.size(); ++k) {
                const Token& t = *idents[k];
                const std::string& s = t.text;
                if (s == "clock" || s == "clock64" || s == "__clock" || s == "__clock64" || contains(s, "globaltimer")
                    || startsWith(s, "get_sreg_clock") || s == "system_clock" || s == "steady_clock"
                    || s == "high_resolution_clock" || s == "__builtin_readcyclecounter"
                    || s == "__builtin_readsteadycounter") {
                    add(rule::TimerRead,
                        "reads a clock (" + s
                            + "); the harness owns the clock and a kernel that reads time can behave "
                              "differently while timed",
                        t.line);
                } else if (s == "__trap" || s == "__brkpt" || s == "__assertfail" || s == "__assert_fail") {
                    add(rule::EarlyExit, s + "() aborts the grid; a kernel must finish every launch", t.line);
                } else if (s == "printf" || s == "vprintf") {
                    add(rule::Printf,
                        "device printf writes to the worker's output, a channel the harness does not own (it can leak "
                        "held-out shapes and input values) and it distorts timing; remove it",
                        t.line);
                } else if ((startsWith(s, "cuda") && s.size() > 4 && std::isupper(static_cast<unsigned char>(s[4])))
                    || (startsWith(s, "cu") && s.size() > 3 && std::isupper(static_cast<unsigned char>(s[2]))
                        && std::islower(static_cast<unsigned char>(s[3])))) {
                    add(rule::HostCode,
                        s
                            + " is a CUDA runtime/driver API call; the harness owns memory, streams, events and "
                              "launches "
                              "(candidates contain device code only)",
                        t.line);
                } else if (s == "malloc" || s == "free" || s == "calloc" || s == "realloc"
                    || s == "__nv_aligned_device_malloc") {
                    add(rule::HostCode,
                        s
                            + " allocates from the device heap, memory the harness does not own and that outlives the "
                              "launch; "
                              "declare a workspace with @kl:workspace",
                        t.line);
                } else if (isHalfArithmetic(s) && !halfMathOk) {
                    add(rule::LowerPrecision,
                        s
                            + " computes in 16-bit floating point; the problem's math is fp32 (convert, compute in "
                              "float, "
                              "convert back). Flagged for review.",
                        t.line);
                }
            }
            for (std::size_t i = 0; i < m_code.size(); ++i) {
                const Token& t = m_code[i];
                if (t.kind != TokenKind::Identifier)
                    continue;
                if (t.text == "new" || (t.text == "delete" && !(i > 0 && isPunct(m_code[i - 1], "=")))) {
                    add(rule::HostCode,
                        "operator " + t.text + " uses the device heap; declare a workspace with @kl:workspace", t.line);
                } else if (t.text == "__host__") {
                    bool device = false;
                    for (std::size_t j = i >= 4 ? i - 4 : 0; j < std::min(m_code.size(), i + 5); ++j)
                        device = device || isIdent(m_code[j], "__device__");
                    if (!device)
                        add(rule::HostCode, "__host__ function: candidates contain device code only", t.line);
                } else if (i + 2 < m_code.size() && isPunct(m_code[i + 1], "::")
                    && (t.text == "ptx" || t.text == "cuda")
                    && (isIdent(m_code[i + 2], "trap") || isIdent(m_code[i + 2], "exit"))) {
                    add(rule::EarlyExit, t.text + "::" + m_code[i + 2].text + " ends the grid early", t.line);
                }
                Family f = familyOfIdentifier(t.text);
                if (f == Family::None && (t.text == "half" || t.text == "half2") && halfUsedAsType(i))
                    f = Family::F16;
                if (f != Family::None && !familyAllowed(f)) {
                    add(rule::LowerPrecision,
                        t.text + " uses " + familyName(f) + ", a precision the problem does not declare (its tensors: "
                            + problemDtypeList() + "). Flagged for review.",
                        t.line);
                }
            }
        }

        void hostLaunchSyntax()
        {
            for (const Token& t : m_all)
                if (isPunct(t, "<<<"))
                    add(rule::HostCode,
                        "<<<...>>> launches a kernel from the candidate; the harness owns launches (declare "
                        "each kernel with @kl:launch)",
                        t.line);
        }

        // ---- inline PTX in string literals -----------------------------------------------------------------
        static bool ptxHasInstruction(const std::string& text, std::string_view word)
        {
            for (std::size_t pos = text.find(word); pos != std::string::npos; pos = text.find(word, pos + 1)) {
                const char before = pos == 0 ? ' ' : text[pos - 1];
                if (std::isalnum(static_cast<unsigned char>(before)) || before == '_' || before == '.' || before == '%'
                    || before == '$')
                    continue;
                if (before == 'n' || before == 't') { // "\n" / "\t" escapes
                    if (!(pos >= 2 && text[pos - 2] == '\\'))
                        continue;
                }
                std::size_t after = pos + word.size();
                if (after < text.size()
                    && (std::isalnum(static_cast<unsigned char>(text[after])) || text[after] == '_'))
                    continue;
                while (after < text.size() && (text[after] == ' ' || text[after] == '\t'))
                    ++after;
                if (after < text.size() && (text[after] == ';' || text[after] == '\\'))
                    return true;
            }
            return false;
        }

        void inlinePtx()
        {
            // Adjacent literals concatenate ("%%glob" "altimer"), so join runs of them first.
            std::vector<std::pair<std::string, int>> strings;
            bool previousWasString = false;
            for (const Token& t : m_all) {
                if (t.kind == TokenKind::String) {
                    if (previousWasString)
                        strings.back().first += t.text;
                    else
                        strings.push_back({ t.text, t.line });
                    previousWasString = true;
                } else {
                    previousWasString = false;
                }
            }
            const bool halfMathOk = hasTag(kAllowHalfMathTag);
            for (const auto& [text, line] : strings) {
                for (std::string_view reg :
                    { "%clock", "%globaltimer", "%pm0", "%pm1", "%pm2", "%pm3", "%pm4", "%pm5", "%pm6", "%pm7" }) {
                    if (contains(text, reg)) {
                        add(rule::TimerRead,
                            "inline PTX reads " + std::string(reg)
                                + "; the harness owns the clock and a kernel that reads time can behave differently "
                                  "while "
                                  "timed",
                            line);
                        break;
                    }
                }
                for (std::string_view word : { "trap", "exit", "brkpt" }) {
                    if (ptxHasInstruction(text, word)) {
                        add(rule::EarlyExit,
                            "inline PTX '" + std::string(word)
                                + "' ends threads or the grid outside the "
                                  "kernel's control flow; use return",
                            line);
                        break;
                    }
                }
                ptxPrecision(text, line, halfMathOk);
            }
        }

        void ptxPrecision(const std::string& text, int line, bool halfMathOk)
        {
            struct Suffix {
                std::string_view text;
                Family family;
            };
            static constexpr Suffix suffixes[] = {
                { ".f16", Family::F16 },
                { ".bf16", Family::BF16 },
                { ".tf32", Family::TF32 },
                { ".e4m3", Family::FP8 },
                { ".e5m2", Family::FP8 },
                { ".e2m1", Family::FP4_6 },
                { ".e3m2", Family::FP4_6 },
                { ".e2m3", Family::FP4_6 },
            };
            for (const Suffix& s : suffixes) {
                if (contains(text, s.text) && !familyAllowed(s.family)) {
                    add(rule::LowerPrecision,
                        "inline PTX uses " + std::string(s.text.substr(1))
                            + ", a precision the problem does not declare "
                              "(its tensors: "
                            + problemDtypeList() + "). Flagged for review.",
                        line);
                    return;
                }
            }
            if (halfMathOk)
                return;
            // 16-bit arithmetic instructions (add.f16, fma.rn.bf16x2, ex2.approx.f16) and 16-bit accumulators
            // (mma ... .f16.f16.f16.f16, whose first type is the accumulator).
            static constexpr std::string_view arithmetic[]
                = { "add", "sub", "mul", "fma", "ex2", "tanh", "rcp", "sqrt", "rsqrt", "lg2", "sin", "cos", "div" };
            std::size_t start = 0;
            while (start < text.size()) {
                while (start < text.size() && !std::isalpha(static_cast<unsigned char>(text[start])))
                    ++start;
                std::size_t end = start;
                while (end < text.size()
                    && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '.' || text[end] == '_'))
                    ++end;
                const std::string_view word(text.data() + start, end - start);
                const std::size_t dot = word.find('.');
                const std::string_view op = word.substr(0, dot);
                if (dot != std::string_view::npos) {
                    const std::string_view mods = word.substr(dot);
                    const bool half = contains(mods, ".f16") || contains(mods, ".bf16");
                    const bool isArith
                        = std::find(std::begin(arithmetic), std::end(arithmetic), op) != std::end(arithmetic);
                    bool accum16 = false;
                    if (op == "mma" || op == "wgmma") {
                        const std::size_t first
                            = std::min({ mods.find(".f16"), mods.find(".bf16"), mods.find(".f32"), mods.find(".s32") });
                        accum16 = first != std::string_view::npos
                            && (mods.compare(first, 4, ".f16") == 0 || mods.compare(first, 5, ".bf16") == 0);
                    }
                    if ((isArith && half) || accum16) {
                        add(rule::LowerPrecision,
                            "inline PTX '" + std::string(word)
                                + "' computes or accumulates in 16-bit; the problem's math is "
                                  "fp32. Flagged for review.",
                            line);
                        return;
                    }
                }
                start = end;
            }
        }

        // ---- static.lower-precision through operators ------------------------------------------------------
        // cuda_fp16.h/cuda_bf16.h overload + - * / on __half and __nv_bfloat16, which rounds every step to 16 bits.
        // Without type checking, a light inference: names declared with a 16-bit type are 16-bit values (or
        // pointers/arrays to them, whose subscripts are 16-bit values); an operator between two such operands is
        // 16-bit arithmetic.
        static bool isSixteenBitType(const Token& t)
        {
            static const std::set<std::string, std::less<>> names = { "__half", "half", "__half2", "half2",
                "__nv_bfloat16", "nv_bfloat16", "__nv_bfloat162", "nv_bfloat162" };
            return t.kind == TokenKind::Identifier && names.count(t.text) > 0;
        }

        struct Declaration {
            std::size_t at = 0; // index of the name token
            std::size_t scopeEnd = 0; // first index past the enclosing block
            bool value16 = false; // "__half x"
            bool indexed16 = false; // "__half* p" or "__half a[8]": subscripts are 16-bit values
        };

        // Declarations of every type (so a float that shadows or reuses the name of a 16-bit variable elsewhere is
        // seen as a float): "TYPE [*&const...] name" followed by = ; , ) [ {.
        std::map<std::string, std::vector<Declaration>> declarations() const
        {
            static const std::set<std::string, std::less<>> notTypes = { "return", "else", "case", "goto", "do",
                "throw", "delete", "new", "sizeof", "typedef", "using", "co_return", "co_yield" };
            std::map<std::string, std::vector<Declaration>> out;
            for (std::size_t j = 1; j + 1 < m_code.size(); ++j) {
                if (m_code[j].kind != TokenKind::Identifier)
                    continue;
                const Token& next = m_code[j + 1];
                if (!(isPunct(next, "=") || isPunct(next, ";") || isPunct(next, ",") || isPunct(next, ")")
                        || isPunct(next, "[") || isPunct(next, "{")))
                    continue;
                std::size_t t = j - 1;
                int stars = 0;
                while (t > 0
                    && (isPunct(m_code[t], "*") || isPunct(m_code[t], "&") || isIdent(m_code[t], "const")
                        || isIdent(m_code[t], "__restrict__") || isIdent(m_code[t], "volatile"))) {
                    stars += isPunct(m_code[t], "*") ? 1 : 0;
                    --t;
                }
                const Token& type = m_code[t];
                if (type.kind != TokenKind::Identifier || notTypes.count(type.text))
                    continue;
                if (t > 0 && (isPunct(m_code[t - 1], ".") || isPunct(m_code[t - 1], "->")))
                    continue;
                Declaration d;
                d.at = j;
                d.scopeEnd = m_code.size();
                int depth = 0;
                for (std::size_t k = j; k < m_code.size(); ++k) {
                    if (isPunct(m_code[k], "{"))
                        ++depth;
                    else if (isPunct(m_code[k], "}") && --depth < 0) {
                        d.scopeEnd = k;
                        break;
                    }
                }
                const bool sixteen = isSixteenBitType(type);
                d.indexed16 = sixteen && (stars == 1 || (stars == 0 && isPunct(next, "[")));
                d.value16 = sixteen && stars == 0 && !isPunct(next, "[");
                out[m_code[j].text].push_back(d);
            }
            return out;
        }

        void sixteenBitOperators()
        {
            if (hasTag(kAllowHalfMathTag))
                return;
            const auto decls = declarations();
            // The declaration of the name used at index u: the nearest earlier one whose scope still holds.
            const auto declarationAt = [&](const std::string& name, std::size_t u) -> const Declaration* {
                const auto it = decls.find(name);
                if (it == decls.end())
                    return nullptr;
                const Declaration* best = nullptr;
                for (const Declaration& d : it->second)
                    if (d.at < u && u < d.scopeEnd && (!best || d.at > best->at))
                        best = &d;
                return best;
            };
            const auto isValue16 = [&](std::size_t u) {
                const Declaration* d = declarationAt(m_code[u].text, u);
                return d && d->value16;
            };
            const auto isIndexed16 = [&](std::size_t u) {
                const Declaration* d = declarationAt(m_code[u].text, u);
                return d && d->indexed16;
            };
            const auto leftIs16 = [&](std::size_t k) {
                if (k == 0)
                    return false;
                const Token& t = m_code[k - 1];
                if (t.kind == TokenKind::Identifier)
                    return isValue16(k - 1)
                        && !(k >= 2 && (isPunct(m_code[k - 2], ".") || isPunct(m_code[k - 2], "->")));
                if (!isPunct(t, "]"))
                    return false;
                int depth = 0;
                for (std::size_t j = k - 1; j-- > 0;) {
                    if (isPunct(m_code[j], "]"))
                        ++depth;
                    else if (isPunct(m_code[j], "[") && depth-- == 0)
                        return j > 0 && m_code[j - 1].kind == TokenKind::Identifier && isIndexed16(j - 1);
                }
                return false;
            };
            const auto rightIs16 = [&](std::size_t k) {
                if (k + 1 >= m_code.size() || m_code[k + 1].kind != TokenKind::Identifier)
                    return false;
                const bool subscript = k + 2 < m_code.size() && isPunct(m_code[k + 2], "[");
                const bool member = k + 2 < m_code.size()
                    && (isPunct(m_code[k + 2], ".") || isPunct(m_code[k + 2], "->") || isPunct(m_code[k + 2], "("));
                return subscript ? isIndexed16(k + 1) : (!member && isValue16(k + 1));
            };
            for (std::size_t k = 1; k + 1 < m_code.size(); ++k) {
                const Token& op = m_code[k];
                static const std::set<std::string, std::less<>> arithmetic
                    = { "+", "-", "*", "/", "+=", "-=", "*=", "/=" };
                if (op.kind != TokenKind::Punct || !arithmetic.count(op.text))
                    continue;
                if (leftIs16(k) && rightIs16(k))
                    add(rule::LowerPrecision,
                        "'" + op.text
                            + "' between 16-bit values rounds to 16 bits at every step; the problem's math is "
                              "fp32 (convert with __bfloat162float/__half2float first). Flagged for review.",
                        op.line);
            }
        }

        // ---- static.mutable-global -------------------------------------------------------------------------
        enum class Scope { Namespace, Class, Function, Initializer };

        static std::size_t skipAttributeGroup(const std::vector<Token>& toks, std::size_t i, std::size_t end)
        {
            static const std::set<std::string, std::less<>> attrs = { "__align__", "__attribute__", "alignas",
                "__launch_bounds__", "__declspec", "__maxnreg__", "__cluster_dims__", "decltype" };
            if (toks[i].kind != TokenKind::Identifier || !attrs.count(toks[i].text) || i + 1 >= end
                || !isPunct(toks[i + 1], "("))
                return i;
            int depth = 0;
            for (std::size_t j = i + 1; j < end; ++j) {
                if (isPunct(toks[j], "("))
                    ++depth;
                else if (isPunct(toks[j], ")") && --depth == 0)
                    return j;
            }
            return end;
        }

        // True when const/constexpr applies to the object itself (not only to what a pointer points at).
        static bool objectIsConst(const std::vector<Token>& decl)
        {
            std::size_t lastIndirection = 0;
            bool anyIndirection = false;
            for (std::size_t i = 0; i < decl.size(); ++i) {
                if (isPunct(decl[i], "*") || isPunct(decl[i], "&")) {
                    lastIndirection = i;
                    anyIndirection = true;
                }
            }
            for (std::size_t i = 0; i < decl.size(); ++i) {
                if (isIdent(decl[i], "constexpr"))
                    return true;
                if (isIdent(decl[i], "const") && (!anyIndirection || i > lastIndirection))
                    return true;
            }
            return false;
        }

        void checkNamespaceDeclaration(const std::vector<Token>& stmt)
        {
            bool device = false;
            for (std::size_t i = 0; i < stmt.size(); ++i) {
                const Token& t = stmt[i];
                if (t.kind != TokenKind::Identifier)
                    continue;
                if (t.text == "typedef" || t.text == "using" || t.text == "static_assert" || t.text == "__global__"
                    || t.text == "__constant__" || t.text == "__shared__" || t.text == "operator"
                    || t.text == "namespace")
                    return;
                device = device || t.text == "__device__" || t.text == "__managed__";
                // __device__ is itself a macro for __attribute__((device)) (or __location__(device)).
                if ((t.text == "__attribute__" || t.text == "__location__" || t.text == "__declspec")
                    && i + 1 < stmt.size() && isPunct(stmt[i + 1], "(")) {
                    int depth = 0;
                    for (std::size_t j = i + 1; j < stmt.size(); ++j) {
                        if (isPunct(stmt[j], "("))
                            ++depth;
                        else if (isPunct(stmt[j], ")") && --depth == 0)
                            break;
                        const std::string& a = stmt[j].text;
                        if (a == "device" || a == "__device__" || a == "managed" || a == "__managed__")
                            device = true;
                        if (a == "constant" || a == "__constant__" || a == "shared" || a == "__shared__")
                            return;
                    }
                }
            }
            if (!device)
                return;
            std::vector<Token> decl;
            for (std::size_t i = 0; i < stmt.size(); ++i) {
                const std::size_t skipped = skipAttributeGroup(stmt, i, stmt.size());
                if (skipped != i) {
                    i = skipped;
                    continue;
                }
                const Token& t = stmt[i];
                if (isPunct(t, "("))
                    return; // a function declaration or definition
                if (isPunct(t, "=") || isPunct(t, ";") || isPunct(t, "{") || isPunct(t, "[") || isPunct(t, ","))
                    break;
                decl.push_back(t);
            }
            const Token* name = nullptr;
            for (const Token& t : decl)
                if (t.kind == TokenKind::Identifier)
                    name = &t;
            if (!name)
                return;
            if (objectIsConst(decl)) {
                m_constDeviceGlobals.insert(name->text);
                return;
            }
            add(rule::MutableGlobal,
                "mutable device global '" + name->text
                    + "' keeps state between launches (caching, call counting); make "
                      "it const/__constant__, or declare a workspace with @kl:workspace",
                name->line);
        }

        void checkFunctionStatic(std::size_t i)
        {
            std::vector<Token> decl;
            for (std::size_t j = i + 1; j < m_code.size(); ++j) {
                const Token& t = m_code[j];
                if (isIdent(t, "__shared__") || isIdent(t, "__constant__"))
                    return;
                if (isPunct(t, "=") || isPunct(t, ";") || isPunct(t, "{") || isPunct(t, "[") || isPunct(t, "(")
                    || isPunct(t, ","))
                    break;
                decl.push_back(t);
            }
            if (objectIsConst(decl))
                return;
            std::string name = decl.empty() ? std::string("?") : decl.back().text;
            add(rule::MutableGlobal,
                "function-scope static '" + name
                    + "' lives in global memory and keeps state between launches; use a "
                      "local, __shared__, or a declared workspace",
                m_code[i].line);
        }

        void mutableGlobals()
        {
            std::vector<Scope> scopes;
            std::vector<Token> stmt;
            bool stmtChecked = false;
            const auto atNamespace = [&] {
                return std::all_of(scopes.begin(), scopes.end(), [](Scope s) { return s == Scope::Namespace; });
            };
            const auto inFunction = [&] {
                return std::any_of(scopes.begin(), scopes.end(), [](Scope s) { return s == Scope::Function; });
            };
            for (std::size_t i = 0; i < m_code.size(); ++i) {
                const Token& t = m_code[i];
                if (isIdent(t, "static") && inFunction()) {
                    checkFunctionStatic(i);
                    continue;
                }
                if (!atNamespace()) {
                    if (isPunct(t, "{")) {
                        // Braces inside an initializer stay initializer; any other nested brace is code we do not
                        // scan for declarations (function-scope statics are handled above).
                        scopes.push_back(scopes.back() == Scope::Initializer ? Scope::Initializer : Scope::Function);
                    } else if (isPunct(t, "}")) {
                        const Scope closed = scopes.back();
                        scopes.pop_back();
                        if (atNamespace() && closed == Scope::Function) {
                            stmt.clear();
                            stmtChecked = false;
                        }
                    }
                    continue;
                }
                if (isPunct(t, ";")) {
                    if (!stmtChecked)
                        checkNamespaceDeclaration(stmt);
                    stmt.clear();
                    stmtChecked = false;
                    continue;
                }
                if (isPunct(t, "}")) {
                    if (!scopes.empty())
                        scopes.pop_back();
                    stmt.clear();
                    stmtChecked = false;
                    continue;
                }
                if (isPunct(t, "{")) {
                    scopes.push_back(classifyBrace(stmt));
                    if (scopes.back() == Scope::Initializer) {
                        checkNamespaceDeclaration(stmt);
                        stmtChecked = true;
                    } else if (scopes.back() == Scope::Namespace) {
                        stmt.clear();
                    }
                    continue;
                }
                stmt.push_back(t);
            }
        }

        // A const device global is ordinary writable global memory once the const is cast away.
        void constCastGlobals()
        {
            if (m_constDeviceGlobals.empty())
                return;
            const auto flag = [&](const Token& name) {
                add(rule::MutableGlobal,
                    "casts const away from device global '" + name.text
                        + "': writing it keeps state between launches; use a declared workspace",
                    name.line);
            };
            for (std::size_t i = 0; i < m_code.size(); ++i) {
                const Token& t = m_code[i];
                if (isIdent(t, "const_cast")) {
                    int depth = 0;
                    for (std::size_t j = i + 1; j < m_code.size(); ++j) {
                        if (isPunct(m_code[j], "("))
                            ++depth;
                        else if (isPunct(m_code[j], ")") && --depth <= 0)
                            break;
                        else if (depth > 0 && m_code[j].kind == TokenKind::Identifier
                            && m_constDeviceGlobals.count(m_code[j].text)) {
                            flag(m_code[j]);
                            break;
                        }
                    }
                } else if (t.kind == TokenKind::Identifier && m_constDeviceGlobals.count(t.text) && i >= 2) {
                    // C-style pointer cast: "(unsigned*)kTable" or "(unsigned*)&kValue".
                    std::size_t k = i - 1;
                    if (isPunct(m_code[k], "&") && k >= 2)
                        --k;
                    if (isPunct(m_code[k], ")") && isPunct(m_code[k - 1], "*"))
                        flag(t);
                }
            }
        }

        static Scope classifyBrace(const std::vector<Token>& stmt)
        {
            bool sawParen = false;
            bool sawAssign = false;
            for (const Token& t : stmt) {
                if (isIdent(t, "namespace"))
                    return Scope::Namespace;
                if (isPunct(t, "("))
                    sawParen = true;
                if (isPunct(t, "="))
                    sawAssign = true;
            }
            if (!stmt.empty() && isIdent(stmt.front(), "extern") && stmt.size() == 2
                && stmt[1].kind == TokenKind::String)
                return Scope::Namespace;
            if (sawAssign)
                return Scope::Initializer;
            for (const Token& t : stmt)
                if (!sawParen
                    && (isIdent(t, "struct") || isIdent(t, "class") || isIdent(t, "union") || isIdent(t, "enum")))
                    return Scope::Class;
            if (!sawParen && !stmt.empty() && (stmt.back().kind == TokenKind::Identifier || isPunct(stmt.back(), "]")))
                return Scope::Initializer; // brace initialization: int x{3};
            return Scope::Function;
        }

        // ---- static.shape-special-case ---------------------------------------------------------------------
        static bool isIntegerType(const Token& t)
        {
            static const std::set<std::string, std::less<>> names
                = { "int", "long", "short", "unsigned", "signed", "size_t", "int32_t", "int64_t", "uint32_t",
                      "uint64_t", "int16_t", "uint16_t", "ptrdiff_t", "index_t", "uint", "auto" };
            return t.kind == TokenKind::Identifier && names.count(t.text) > 0;
        }

        std::set<std::string> shapeNames() const
        {
            std::set<std::string> names;
            for (const DimSpec& d : m_problem.dims)
                names.insert(d.name);
            for (std::size_t i = 0; i < m_code.size(); ++i) {
                if (!isIdent(m_code[i], "__global__"))
                    continue;
                std::size_t j = i + 1;
                for (; j < m_code.size(); ++j) {
                    const std::size_t skipped = skipAttributeGroup(m_code, j, m_code.size());
                    if (skipped != j) {
                        j = skipped;
                        continue;
                    }
                    if (isPunct(m_code[j], "(") || isPunct(m_code[j], ";") || isPunct(m_code[j], "{"))
                        break;
                }
                if (j >= m_code.size() || !isPunct(m_code[j], "("))
                    continue;
                std::vector<Token> param;
                int depth = 0;
                for (std::size_t k = j + 1; k < m_code.size(); ++k) {
                    const Token& t = m_code[k];
                    if (isPunct(t, "(") || isPunct(t, "<"))
                        ++depth;
                    if ((isPunct(t, ")") || isPunct(t, ">")) && depth > 0) {
                        --depth;
                        param.push_back(t);
                        continue;
                    }
                    if ((isPunct(t, ",") && depth == 0) || (isPunct(t, ")") && depth == 0)) {
                        const bool indirect = std::any_of(param.begin(), param.end(),
                            [](const Token& p) { return isPunct(p, "*") || isPunct(p, "&") || isPunct(p, "["); });
                        const bool integral = std::any_of(param.begin(), param.end(), isIntegerType);
                        if (!indirect && integral && param.back().kind == TokenKind::Identifier)
                            names.insert(param.back().text);
                        param.clear();
                        if (isPunct(t, ")"))
                            break;
                        continue;
                    }
                    param.push_back(t);
                }
            }
            // Plain aliases: "const int rows = T;" makes rows a shape name too.
            for (std::size_t i = 2; i + 2 < m_code.size(); ++i) {
                if (isPunct(m_code[i], "=") && m_code[i - 1].kind == TokenKind::Identifier
                    && isIntegerType(m_code[i - 2]) && m_code[i + 1].kind == TokenKind::Identifier
                    && names.count(m_code[i + 1].text) && (isPunct(m_code[i + 2], ";") || isPunct(m_code[i + 2], ",")))
                    names.insert(m_code[i - 1].text);
            }
            return names;
        }

        // Length of a bare shape operand at [begin, end) ("T", "gridDim.x"), or 0.
        bool isBareShape(
            std::size_t begin, std::size_t end, const std::set<std::string>& names, std::string* what) const
        {
            if (end == begin + 1 && m_code[begin].kind == TokenKind::Identifier && names.count(m_code[begin].text)) {
                *what = m_code[begin].text;
                return true;
            }
            if (end == begin + 3 && isIdent(m_code[begin], "gridDim") && isPunct(m_code[begin + 1], ".")
                && m_code[begin + 2].kind == TokenKind::Identifier) {
                *what = "gridDim." + m_code[begin + 2].text;
                return true;
            }
            return false;
        }

        static bool isOperandBoundary(const Token& t)
        {
            static const std::set<std::string, std::less<>> puncts
                = { "(", ")", "&&", "||", "!", "?", ":", ",", ";", "{", "}", "=", "+=", "-=", "*=", "/=", "[", "]" };
            return (t.kind == TokenKind::Punct && puncts.count(t.text)) || isIdent(t, "return");
        }

        // The statement an if-condition guards is nothing but a jump: "if (T < 16) return;" or "{ return; }".
        bool guardsOnlyAJump(std::size_t comparison) const
        {
            int depth = 0;
            std::size_t open = comparison;
            bool found = false;
            for (std::size_t j = comparison; j-- > 0;) {
                const Token& t = m_code[j];
                if (isPunct(t, ")"))
                    ++depth;
                else if (isPunct(t, "(")) {
                    if (depth == 0) {
                        if (j > 0 && isIdent(m_code[j - 1], "if")) {
                            open = j;
                            found = true;
                            break;
                        }
                    } else {
                        --depth;
                    }
                } else if (isPunct(t, ";") || isPunct(t, "{") || isPunct(t, "}")) {
                    break;
                }
            }
            if (!found)
                return false;
            depth = 0;
            std::size_t close = open;
            for (std::size_t j = open; j < m_code.size(); ++j) {
                if (isPunct(m_code[j], "("))
                    ++depth;
                else if (isPunct(m_code[j], ")") && --depth == 0) {
                    close = j;
                    break;
                }
            }
            std::size_t body = close + 1;
            const bool braced = body < m_code.size() && isPunct(m_code[body], "{");
            if (braced)
                ++body;
            if (body >= m_code.size())
                return false;
            const Token& first = m_code[body];
            if (!(isIdent(first, "return") || isIdent(first, "break") || isIdent(first, "continue")
                    || isIdent(first, "goto")))
                return false;
            std::size_t semi = body;
            while (semi < m_code.size() && !isPunct(m_code[semi], ";"))
                ++semi;
            return !braced || (semi + 1 < m_code.size() && isPunct(m_code[semi + 1], "}"));
        }

        void shapeSpecialCases()
        {
            const std::set<std::string> names = shapeNames();
            for (std::size_t k = 1; k + 1 < m_code.size(); ++k) {
                const Token& op = m_code[k];
                if (op.kind != TokenKind::Punct)
                    continue;
                const bool equality = op.text == "==" || op.text == "!=";
                const bool relational = op.text == "<" || op.text == ">" || op.text == "<=" || op.text == ">=";
                if (!equality && !relational)
                    continue;
                std::size_t leftBegin = k;
                while (leftBegin > 0 && !isOperandBoundary(m_code[leftBegin - 1]))
                    --leftBegin;
                std::size_t rightEnd = k + 1;
                while (rightEnd < m_code.size() && !isOperandBoundary(m_code[rightEnd]))
                    ++rightEnd;
                std::string dim;
                std::optional<std::int64_t> literal;
                if (isBareShape(leftBegin, k, names, &dim) && rightEnd == k + 2)
                    literal = integerLiteral(m_code[k + 1]);
                else if (isBareShape(k + 1, rightEnd, names, &dim) && leftBegin + 1 == k)
                    literal = integerLiteral(m_code[leftBegin]);
                if (!literal || *literal <= 1)
                    continue;
                if (equality) {
                    add(rule::ShapeSpecialCase,
                        "compares " + dim + " " + op.text + " " + std::to_string(*literal)
                            + ": a branch on one exact shape (special-casing a tuned shape). Flagged for review; if "
                              "both "
                              "paths do the full work, express the specialization as a @kl:param instead",
                        op.line);
                } else if (guardsOnlyAJump(k)) {
                    add(rule::ShapeSpecialCase,
                        "skips the work when " + dim + " " + op.text + " " + std::to_string(*literal)
                            + " (returns early for some shapes). Flagged for review; held-out shapes will check it",
                        op.line);
                }
            }
            // switch (T) { case 4096: ... } is an exact-shape branch too.
            for (std::size_t i = 0; i + 3 < m_code.size(); ++i) {
                if (!isIdent(m_code[i], "switch") || !isPunct(m_code[i + 1], "("))
                    continue;
                std::size_t close = i + 2;
                while (close < m_code.size() && !isPunct(m_code[close], ")"))
                    ++close;
                std::string dim;
                if (close < m_code.size() && isBareShape(i + 2, close, names, &dim))
                    add(rule::ShapeSpecialCase,
                        "switches on " + dim
                            + ": case labels pick exact shapes. Flagged for review; express a "
                              "specialization as a @kl:param instead",
                        m_code[i].line);
            }
            // min(dim, literal) is not flagged: it sizes tiles and chunks while a loop covers the rest (honest, and
            // common); a clamp that drops work leaves outputs wrong, which held-out shapes at the extremes show.
        }

        struct Macro {
            bool function = false;
            std::vector<std::string> params;
            std::vector<Token> body;
        };

        void defineMacro(std::size_t i)
        {
            if (i >= m_all.size() || m_all[i].kind != TokenKind::Identifier)
                return;
            Macro m;
            const std::string name = m_all[i].text;
            std::size_t j = i + 1;
            if (j < m_all.size() && isPunct(m_all[j], "(") && !m_all[j].spaceBefore) {
                m.function = true;
                for (++j; j < m_all.size() && !isPunct(m_all[j], ")") && m_all[j].kind != TokenKind::DirectiveEnd; ++j)
                    if (m_all[j].kind == TokenKind::Identifier || isPunct(m_all[j], "..."))
                        m.params.push_back(m_all[j].kind == TokenKind::Identifier ? m_all[j].text : "__VA_ARGS__");
                ++j;
            }
            for (; j < m_all.size() && m_all[j].kind != TokenKind::DirectiveEnd; ++j)
                m.body.push_back(m_all[j]);
            m_macros[name] = std::move(m);
        }

        std::vector<Token> expand(const std::vector<Token>& in, std::vector<std::string>& active)
        {
            const auto isActive = [&](const std::string& name) {
                return std::find(active.begin(), active.end(), name) != active.end();
            };
            std::vector<Token> out;
            for (std::size_t i = 0; i < in.size(); ++i) {
                const Token& t = in[i];
                const auto it = t.kind == TokenKind::Identifier ? m_macros.find(t.text) : m_macros.end();
                if (it != m_macros.end() && m_expansionBudget >= 0 && !isActive(t.text)) {
                    m_expansionBudget -= static_cast<long>(it->second.body.size()) + 1;
                    if (m_expansionBudget < 0)
                        m_bombLine = t.line;
                }
                if (it == m_macros.end() || isActive(t.text) || active.size() > 16 || m_expansionBudget < 0) {
                    out.push_back(t);
                    continue;
                }
                const Macro& m = it->second;
                std::vector<Token> replaced;
                if (!m.function) {
                    replaced = m.body;
                } else {
                    if (i + 1 >= in.size() || !isPunct(in[i + 1], "(")) {
                        out.push_back(t);
                        continue;
                    }
                    std::vector<std::vector<Token>> args(1);
                    int depth = 0;
                    std::size_t j = i + 1;
                    for (; j < in.size(); ++j) {
                        if (isPunct(in[j], "(") && depth++ == 0)
                            continue;
                        if (isPunct(in[j], ")") && --depth == 0)
                            break;
                        if (isPunct(in[j], ",") && depth == 1 && args.size() < m.params.size())
                            args.emplace_back();
                        else
                            args.back().push_back(in[j]);
                    }
                    for (const Token& b : m.body) {
                        const auto p = std::find(m.params.begin(), m.params.end(), b.text);
                        if (b.kind == TokenKind::Identifier && p != m.params.end()) {
                            const std::size_t k = static_cast<std::size_t>(p - m.params.begin());
                            if (k < args.size())
                                replaced.insert(replaced.end(), args[k].begin(), args[k].end());
                        } else {
                            replaced.push_back(b);
                        }
                    }
                    i = j;
                }
                for (Token& r : replaced)
                    r.line = t.line;
                active.push_back(t.text);
                const std::vector<Token> expanded = expand(replaced, active);
                active.pop_back();
                out.insert(out.end(), expanded.begin(), expanded.end());
            }
            return out;
        }

        // Nested macros can grow exponentially; past this many expanded tokens the source is rejected.
        static constexpr long kExpansionTokens = 200'000;
        long m_expansionBudget = kExpansionTokens;
        int m_bombLine = 0;
        std::map<std::string, Macro> m_macros;
        std::set<std::string> m_constDeviceGlobals;
        std::vector<Token> m_all;
        std::vector<Token> m_code; // without preprocessor directives, macros expanded
        const Problem& m_problem;
        std::vector<VerdictReason> m_out;
        std::set<std::pair<std::string, int>> m_seen;
    };

} // namespace

const std::vector<std::string>& includeAllowList()
{
    static const std::vector<std::string> list = {
        "cuda_fp16.h",
        "cuda_bf16.h",
        "cuda_fp8.h",
        "cuda_fp4.h",
        "cuda_fp6.h",
        "cooperative_groups.h",
        "cooperative_groups/",
        "cub/",
        "cuda/",
        // CUTLASS/CuTe (the pinned release on NVRTC's include path, kernels/nvrtc_compiler.h): the token rules judge
        // the candidate's own text and the PTX rules what the headers compile to, so the library is not read here.
        "cute/",
        "cutlass/",
        "mma.h",
        "cuda_pipeline.h",
        "cuda_pipeline_primitives.h",
        "cuda_awbarrier.h",
        "cuda_awbarrier_primitives.h",
        "math_constants.h",
        "vector_types.h",
        "vector_functions.h",
        // Standard headers for types and limits: harmless (device code cannot call the host), and LLMs add them.
        "cstdint",
        "stdint.h",
        "climits",
        "cfloat",
        "limits",
        "type_traits",
    };
    return list;
}

bool includeAllowed(const std::string& header)
{
    if (header.find("..") != std::string::npos || header.empty() || header.front() == '/')
        return false;
    for (const std::string& entry : includeAllowList()) {
        if (entry.back() == '/' ? header.compare(0, entry.size(), entry) == 0 && header.size() > entry.size()
                                : header == entry)
            return true;
    }
    return false;
}

std::vector<VerdictReason> checkSource(const std::string& source, const Problem& problem)
{
    if (detectLanguage(source) == KernelLanguage::Triton)
        return checkTritonSource(source, problem);
    return Checker(source, problem).run();
}

} // namespace kl::referee
