#pragma once
// What the static rules share (static_rules*.cpp for CUDA, triton_rules.cpp for Triton): the reasons one source
// collects, and for CUDA the token streams every rule group reads.
#include "core/problem.h"
#include "kernels/referee/precision.h"
#include "kernels/referee/referee.h"
#include "kernels/referee/source_tokens.h"

#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kl::referee {

// One reason per (rule, line), the first message kept, blocking as the rule table says; returned in line order.
class Findings {
public:
    void add(const char* rule, std::string message, int line);
    std::vector<VerdictReason> byLine() &&;

private:
    std::vector<VerdictReason> m_out;
    std::set<std::pair<std::string, int>> m_seen;
};

inline bool isIdent(const Token& t, std::string_view s)
{
    return t.kind == TokenKind::Identifier && t.text == s;
}
inline bool isPunct(const Token& t, std::string_view s)
{
    return t.kind == TokenKind::Punct && t.text == s;
}
inline bool startsWith(std::string_view s, std::string_view p)
{
    return s.substr(0, p.size()) == p;
}
inline bool contains(std::string_view s, std::string_view p)
{
    return s.find(p) != std::string_view::npos;
}

// Past an attribute group at toks[i] ("__align__(16)", "__launch_bounds__(256)", "alignas(8)", "decltype(x)"): the
// index of its closing parenthesis (end when unclosed), else i.
std::size_t skipAttributeGroup(const std::vector<Token>& toks, std::size_t i, std::size_t end);

// A CUDA candidate as the rules read it.
struct CudaSource {
    std::vector<Token> all; // every token, preprocessor directives included
    std::vector<Token> code; // without preprocessor directives, macros expanded
};

// A group of rules over one source: each group file derives its checker from this.
class CudaRuleGroup {
public:
    CudaRuleGroup(const CudaSource& source, const Problem& problem, Findings& found)
        : m_all(source.all)
        , m_code(source.code)
        , m_problem(problem)
        , m_found(found)
    {
    }

protected:
    void add(const char* rule, std::string message, int line) { m_found.add(rule, std::move(message), line); }
    bool hasTag(const char* tag) const { return problemHasTag(m_problem, tag); }

    const std::vector<Token>& m_all;
    const std::vector<Token>& m_code;
    const Problem& m_problem;

private:
    Findings& m_found;
};

// The rule groups, in the order checkSource runs them.
void identifierRules(
    const CudaSource& source, const Problem& problem, Findings& found); // timers, exits, host code,
                                                                        // printf, precision, inline PTX
void globalStateRules(const CudaSource& source, const Problem& problem, Findings& found); // static.mutable-global
void sixteenBitOperatorRules(const CudaSource& source, const Problem& problem, Findings& found);
void shapeRules(const CudaSource& source, const Problem& problem, Findings& found); // static.shape-special-case

} // namespace kl::referee
