#include "kernels/export/c_expr.h"

#include "core/errors.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

namespace kl::exporter {

namespace {

    // A second parser for the grammar of core/expr.cpp: Expr keeps its tree private, and the exporter needs
    // the tree to emit code rather than a value.
    struct Node {
        enum class Kind { Number, Var, Unary, Binary, Ternary, Call };
        Kind kind = Kind::Number;
        double number = 0;
        std::string name;
        std::vector<std::shared_ptr<const Node>> args;
    };
    using NodePtr = std::shared_ptr<const Node>;

    class Parser {
    public:
        Parser(const std::string& text, std::string what)
            : m_s(text)
            , m_what(std::move(what))
        {
        }

        NodePtr parseAll()
        {
            NodePtr n = ternary();
            skip();
            if (m_pos != m_s.size())
                fail("unexpected '" + std::string(1, m_s[m_pos]) + "'");
            return n;
        }

    private:
        [[noreturn]] void fail(const std::string& why) const
        {
            throw InputError(m_what + ": expression '" + m_s + "', column " + std::to_string(m_pos + 1) + ": " + why);
        }
        void skip()
        {
            while (m_pos < m_s.size() && std::isspace(static_cast<unsigned char>(m_s[m_pos])))
                ++m_pos;
        }
        bool eat(const char* tok)
        {
            skip();
            const std::string t(tok);
            if (m_s.compare(m_pos, t.size(), t) != 0)
                return false;
            if (t.size() == 1 && m_pos + 1 < m_s.size()) {
                const char c = t[0], n = m_s[m_pos + 1];
                if ((c == '<' || c == '>' || c == '=' || c == '!') && n == '=')
                    return false;
                if ((c == '&' && n == '&') || (c == '|' && n == '|'))
                    return false;
            }
            m_pos += t.size();
            return true;
        }
        static NodePtr make(Node::Kind k, std::string name, std::vector<NodePtr> args, double num = 0)
        {
            auto n = std::make_shared<Node>();
            n->kind = k;
            n->name = std::move(name);
            n->args = std::move(args);
            n->number = num;
            return n;
        }
        NodePtr ternary()
        {
            NodePtr c = logicalOr();
            if (eat("?")) {
                NodePtr a = ternary();
                if (!eat(":"))
                    fail("expected ':'");
                NodePtr b = ternary();
                return make(Node::Kind::Ternary, "?", { c, a, b });
            }
            return c;
        }
        template <typename Next> NodePtr binaryLevel(std::initializer_list<const char*> ops, Next next)
        {
            NodePtr lhs = (this->*next)();
            for (;;) {
                bool matched = false;
                for (const char* op : ops) {
                    if (eat(op)) {
                        NodePtr rhs = (this->*next)();
                        lhs = make(Node::Kind::Binary, op, { lhs, rhs });
                        matched = true;
                        break;
                    }
                }
                if (!matched)
                    return lhs;
            }
        }
        NodePtr logicalOr() { return binaryLevel({ "||" }, &Parser::logicalAnd); }
        NodePtr logicalAnd() { return binaryLevel({ "&&" }, &Parser::equality); }
        NodePtr equality() { return binaryLevel({ "==", "!=" }, &Parser::relational); }
        NodePtr relational() { return binaryLevel({ "<=", ">=", "<", ">" }, &Parser::additive); }
        NodePtr additive() { return binaryLevel({ "+", "-" }, &Parser::multiplicative); }
        NodePtr multiplicative() { return binaryLevel({ "*", "/", "%" }, &Parser::unary); }
        NodePtr unary()
        {
            if (eat("-"))
                return make(Node::Kind::Unary, "-", { unary() });
            if (eat("+"))
                return unary();
            if (eat("!"))
                return make(Node::Kind::Unary, "!", { unary() });
            return primary();
        }
        NodePtr primary()
        {
            skip();
            if (m_pos >= m_s.size())
                fail("unexpected end");
            const char c = m_s[m_pos];
            if (c == '(') {
                ++m_pos;
                NodePtr n = ternary();
                if (!eat(")"))
                    fail("expected ')'");
                return n;
            }
            if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
                const char* begin = m_s.c_str() + m_pos;
                char* end = nullptr;
                const double v = std::strtod(begin, &end);
                if (end == begin)
                    fail("bad number");
                m_pos += static_cast<std::size_t>(end - begin);
                return make(Node::Kind::Number, {}, {}, v);
            }
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                const std::size_t start = m_pos;
                while (
                    m_pos < m_s.size() && (std::isalnum(static_cast<unsigned char>(m_s[m_pos])) || m_s[m_pos] == '_'))
                    ++m_pos;
                std::string id = m_s.substr(start, m_pos - start);
                if (eat("(")) {
                    std::vector<NodePtr> args;
                    if (!eat(")")) {
                        do {
                            args.push_back(ternary());
                        } while (eat(","));
                        if (!eat(")"))
                            fail("expected ')' after arguments of " + id);
                    }
                    static const std::map<std::string, std::size_t> arity = { { "min", 2 }, { "max", 2 },
                        { "ceil_div", 2 }, { "div", 2 }, { "pow", 2 }, { "floor", 1 }, { "ceil", 1 }, { "round", 1 },
                        { "abs", 1 }, { "log2", 1 }, { "sqrt", 1 }, { "next_pow2", 1 } };
                    const auto it = arity.find(id);
                    if (it == arity.end())
                        fail("unknown function '" + id + "'");
                    if (it->second != args.size())
                        fail(id + " takes " + std::to_string(it->second) + " arguments");
                    return make(Node::Kind::Call, id, std::move(args));
                }
                if (id == "true")
                    return make(Node::Kind::Number, {}, {}, 1);
                if (id == "false")
                    return make(Node::Kind::Number, {}, {}, 0);
                return make(Node::Kind::Var, id, {});
            }
            fail("unexpected '" + std::string(1, c) + "'");
        }

        const std::string& m_s;
        std::string m_what;
        std::size_t m_pos = 0;
    };

    std::string number(double v)
    {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", v);
        std::string s = buf;
        if (s.find_first_of(".eEni") == std::string::npos)
            s += ".0";
        return s;
    }

    std::string emit(const Node& n, const IdentifierMap& ids)
    {
        using K = Node::Kind;
        switch (n.kind) {
        case K::Number:
            return number(n.number);
        case K::Var:
            return ids(n.name);
        case K::Unary:
            return n.name == "-" ? "(-" + emit(*n.args[0], ids) + ")"
                                 : "((" + emit(*n.args[0], ids) + ") == 0.0 ? 1.0 : 0.0)";
        case K::Ternary:
            return "((" + emit(*n.args[0], ids) + ") != 0.0 ? (" + emit(*n.args[1], ids) + ") : ("
                + emit(*n.args[2], ids) + "))";
        case K::Binary: {
            const std::string a = emit(*n.args[0], ids), b = emit(*n.args[1], ids);
            const std::string& op = n.name;
            if (op == "&&" || op == "||")
                return "(((" + a + ") != 0.0 " + op + " (" + b + ") != 0.0) ? 1.0 : 0.0)";
            if (op == "/")
                return "klx_div(" + a + ", " + b + ")";
            if (op == "%")
                return "klx_mod(" + a + ", " + b + ")";
            if (op == "+" || op == "-" || op == "*")
                return "(" + a + " " + op + " " + b + ")";
            return "((" + a + ") " + op + " (" + b + ") ? 1.0 : 0.0)";
        }
        case K::Call: {
            // div() is floor division; "klx_div" is taken by the "/" operator.
            std::string s = (n.name == "div" ? std::string("klx_div_floor") : "klx_" + n.name) + "(";
            for (std::size_t i = 0; i < n.args.size(); ++i)
                s += (i ? ", " : "") + emit(*n.args[i], ids);
            return s + ")";
        }
        }
        return "0.0";
    }

    void collect(const Node& n, std::set<std::string>& out)
    {
        if (n.kind == Node::Kind::Var)
            out.insert(n.name);
        for (const auto& a : n.args)
            collect(*a, out);
    }

} // namespace

std::string toCExpression(const std::string& text, const IdentifierMap& ids, const std::string& what)
{
    Parser p(text, what);
    return emit(*p.parseAll(), ids);
}

std::vector<std::string> expressionIdentifiers(const std::string& text)
{
    Parser p(text, "expression");
    std::set<std::string> names;
    collect(*p.parseAll(), names);
    return { names.begin(), names.end() };
}

bool asLinearDim(const std::string& text, LinearDim* out)
{
    NodePtr n;
    try {
        n = Parser(text, "shape").parseAll();
    } catch (const InputError&) {
        return false;
    }
    auto isPositiveInt = [](const Node& c) {
        return c.kind == Node::Kind::Number && c.number > 0 && c.number == std::floor(c.number) && c.number < 1e15;
    };
    if (n->kind == Node::Kind::Var) {
        *out = { n->name, 1 };
        return true;
    }
    if (n->kind == Node::Kind::Binary && n->name == "*") {
        const Node& a = *n->args[0];
        const Node& b = *n->args[1];
        if (a.kind == Node::Kind::Var && isPositiveInt(b)) {
            *out = { a.name, static_cast<long long>(b.number) };
            return true;
        }
        if (b.kind == Node::Kind::Var && isPositiveInt(a)) {
            *out = { b.name, static_cast<long long>(a.number) };
            return true;
        }
    }
    return false;
}

std::string expressionRuntimeC()
{
    return R"KLX(/* Expression helpers: the semantics of KernelLoop's launch-plan expressions (double evaluation,
   C integer division and remainder when both operands are integers). */
#include <math.h>

static inline int klx_is_int(double v) { return isfinite(v) && v == floor(v) && fabs(v) < 9.0e15; }
static inline double klx_div(double a, double b)
{
    if (b == 0.0) return NAN;
    if (klx_is_int(a) && klx_is_int(b)) return (double)((long long)a / (long long)b);
    return a / b;
}
static inline double klx_mod(double a, double b)
{
    if (b == 0.0) return NAN;
    if (klx_is_int(a) && klx_is_int(b)) return (double)((long long)a % (long long)b);
    return fmod(a, b);
}
static inline double klx_min(double a, double b) { return a < b ? a : b; }
static inline double klx_max(double a, double b) { return a > b ? a : b; }
static inline double klx_ceil_div(double a, double b) { return b == 0.0 ? NAN : ceil(a / b); }
static inline double klx_div_floor(double a, double b) { return b == 0.0 ? NAN : floor(a / b); }
static inline double klx_pow(double a, double b) { return pow(a, b); }
static inline double klx_floor(double a) { return floor(a); }
static inline double klx_ceil(double a) { return ceil(a); }
static inline double klx_round(double a) { return round(a); }
static inline double klx_abs(double a) { return fabs(a); }
static inline double klx_log2(double a) { return log2(a); }
static inline double klx_sqrt(double a) { return sqrt(a); }
static inline double klx_next_pow2(double a)
{
    double p = 1.0;
    while (p < a) p *= 2.0;
    return p;
}
/* 1 when v is an integer in [lo, hi]; stores it. */
static inline int klx_to_int(double v, long long lo, long long hi, long long* out)
{
    if (!klx_is_int(v) || v < (double)lo || v > (double)hi) return 0;
    *out = (long long)v;
    return 1;
}
)KLX";
}

} // namespace kl::exporter
