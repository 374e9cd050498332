#pragma once
// Integer expressions over named variables: shape dims and tunable parameters.
// Used for launch geometry ("ceil_div(T, BLOCK)"), buffer sizes, constraints ("BLOCK % 32 == 0")
// and problem formulas. Parsed once, evaluated many times during a sweep.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kl {

using Bindings = std::map<std::string, double, std::less<>>;

class ExprError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// An expression is evaluated in double precision; integer contexts round-check the result.
// Grammar: ternary ?:, || && ! == != < <= > >= + - * / % (C semantics on integers),
// unary -, parentheses, numbers, identifiers and the functions
// min max ceil_div div floor ceil round abs log2 sqrt pow next_pow2.
// Expressions come from problem.json, candidates and LLM replies, so their size is bounded: every walk of the
// tree (evaluation, the exporter, the destructor) recurses at most kMaxDepth levels.
class Expr {
public:
    static constexpr std::size_t kMaxLength = 64 * 1024; // characters
    static constexpr int kMaxDepth = 256; // tree levels: nesting, and each operator of a chain such as a+b+c

    Expr() = default;
    static Expr parse(const std::string& text); // throws ExprError with the column
    // Whether name can be bound as a variable: an identifier that is not a function or true/false.
    static bool isVariableName(const std::string& name);
    double evaluate(const Bindings& vars) const; // throws ExprError on unknown names or division by zero
    std::int64_t evaluateInt(const Bindings& vars) const; // throws if the value is not an integer
    bool evaluateBool(const Bindings& vars) const { return evaluate(vars) != 0.0; }
    const std::string& text() const { return m_text; }
    std::vector<std::string> identifiers() const;
    bool empty() const { return !m_root; }

    // The parsed tree, for code generators (the exporter emits it as C). A Number whose name is "real" was
    // written with a point or exponent: it makes "/" and "%" real division, as the evaluator does.
    struct Node {
        enum class Kind { Number, Var, Unary, Binary, Ternary, Call };
        Kind kind = Kind::Number;
        double number = 0;
        std::string name; // variable, operator or function name
        std::vector<std::shared_ptr<const Node>> args;
    };
    const Node* root() const { return m_root.get(); }

private:
    std::string m_text;
    std::shared_ptr<const Node> m_root;
};

} // namespace kl
