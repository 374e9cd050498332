// Identifier rules (timers, early exit, host code, printf, lower-precision names) and inline PTX in string
// literals. Identifier rules only see Identifier tokens, so comments and string contents never trigger them.
#include "kernels/referee/static_rules.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <iterator>

namespace kl::referee {
namespace {

    class IdentifierRules : CudaRuleGroup {
    public:
        using CudaRuleGroup::CudaRuleGroup;

        void run()
        {
            identifierRules();
            inlinePtx();
            hostLaunchSyntax();
        }

    private:
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
    };

} // namespace

void identifierRules(const CudaSource& source, const Problem& problem, Findings& found)
{
    IdentifierRules(source, problem, found).run();
}

} // namespace kl::referee
