// static.lower-precision through operators: + - * / between 16-bit values.
#include "kernels/referee/static_rules.h"

#include <functional>
#include <map>

namespace kl::referee {
namespace {

    class SixteenBitOperators : CudaRuleGroup {
    public:
        using CudaRuleGroup::CudaRuleGroup;

        void run()
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

    private:
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
    };

} // namespace

void sixteenBitOperatorRules(const CudaSource& source, const Problem& problem, Findings& found)
{
    SixteenBitOperators(source, problem, found).run();
}

} // namespace kl::referee
