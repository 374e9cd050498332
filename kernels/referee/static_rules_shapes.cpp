// static.shape-special-case: branches on one exact shape, and early exits for some shapes.
#include "kernels/referee/static_rules.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>

namespace kl::referee {
namespace {

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

    class ShapeRules : CudaRuleGroup {
    public:
        using CudaRuleGroup::CudaRuleGroup;

        void run()
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

    private:
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
    };

} // namespace

void shapeRules(const CudaSource& source, const Problem& problem, Findings& found)
{
    ShapeRules(source, problem, found).run();
}

} // namespace kl::referee
