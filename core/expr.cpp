#include "core/expr.h"

#include "core/errors.h"

#include <cctype>
#include <cmath>
#include <set>

namespace kl {

namespace {

    using NodePtr = std::shared_ptr<const Expr::Node>;

    const std::map<std::string, std::size_t, std::less<>> kArity
        = { { "min", 2 }, { "max", 2 }, { "ceil_div", 2 }, { "div", 2 }, { "pow", 2 }, { "floor", 1 }, { "ceil", 1 },
              { "round", 1 }, { "abs", 1 }, { "log2", 1 }, { "sqrt", 1 }, { "next_pow2", 1 } };

    // A parsed subtree with its height, so that no tree deeper than Expr::kMaxDepth is ever built.
    struct Sub {
        NodePtr node;
        int height = 1;
    };

    class Parser {
    public:
        explicit Parser(const std::string& text)
            : m_s(text)
        {
        }

        NodePtr parseAll()
        {
            Sub n = ternary();
            skip();
            if (m_pos != m_s.size())
                fail("unexpected '" + std::string(1, m_s[m_pos]) + "'");
            return n.node;
        }

    private:
        [[noreturn]] void fail(const std::string& what) const
        {
            throw ExprError("expression '" + abbreviate(m_s) + "', column " + std::to_string(m_pos + 1) + ": " + what);
        }
        // The grammar recurses through ternary() and unary(); bounding them bounds the parser's stack.
        class Nesting {
        public:
            explicit Nesting(Parser& p)
                : m_p(p)
            {
                if (++m_p.m_nesting > Expr::kMaxDepth)
                    m_p.fail("nested more than " + std::to_string(Expr::kMaxDepth) + " levels deep (the limit)");
            }
            ~Nesting() { --m_p.m_nesting; }
            Nesting(const Nesting&) = delete;
            Nesting& operator=(const Nesting&) = delete;

        private:
            Parser& m_p;
        };
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
            // Keep "<" from matching the start of "<=" and so on.
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
        Sub make(Expr::Node::Kind k, std::string name, std::vector<Sub> args, double num = 0) const
        {
            auto n = std::make_shared<Expr::Node>();
            n->kind = k;
            n->name = std::move(name);
            n->number = num;
            int height = 1;
            for (auto& a : args) {
                height = std::max(height, a.height + 1);
                n->args.push_back(std::move(a.node));
            }
            if (height > Expr::kMaxDepth)
                fail("more than " + std::to_string(Expr::kMaxDepth)
                    + " levels deep (the limit; each operator of a chain such as a+b+c is one level)");
            return { std::move(n), height };
        }
        Sub ternary()
        {
            const Nesting nesting(*this);
            Sub c = logicalOr();
            if (eat("?")) {
                Sub a = ternary();
                if (!eat(":"))
                    fail("expected ':'");
                Sub b = ternary();
                return make(Expr::Node::Kind::Ternary, "?", { std::move(c), std::move(a), std::move(b) });
            }
            return c;
        }
        template <typename Next> Sub binaryLevel(std::initializer_list<const char*> ops, Next next)
        {
            Sub lhs = (this->*next)();
            for (;;) {
                bool matched = false;
                for (const char* op : ops) {
                    if (eat(op)) {
                        Sub rhs = (this->*next)();
                        lhs = make(Expr::Node::Kind::Binary, op, { std::move(lhs), std::move(rhs) });
                        matched = true;
                        break;
                    }
                }
                if (!matched)
                    return lhs;
            }
        }
        Sub logicalOr() { return binaryLevel({ "||" }, &Parser::logicalAnd); }
        Sub logicalAnd() { return binaryLevel({ "&&" }, &Parser::equality); }
        Sub equality() { return binaryLevel({ "==", "!=" }, &Parser::relational); }
        Sub relational() { return binaryLevel({ "<=", ">=", "<", ">" }, &Parser::additive); }
        Sub additive() { return binaryLevel({ "+", "-" }, &Parser::multiplicative); }
        Sub multiplicative() { return binaryLevel({ "*", "/", "%" }, &Parser::unary); }
        Sub unary()
        {
            for (const char* op : { "-", "+", "!" }) {
                if (!eat(op))
                    continue;
                const Nesting nesting(*this);
                Sub operand = unary();
                if (*op == '+')
                    return operand;
                return make(Expr::Node::Kind::Unary, op, { std::move(operand) });
            }
            return primary();
        }
        Sub primary()
        {
            skip();
            if (m_pos >= m_s.size())
                fail("unexpected end");
            const char c = m_s[m_pos];
            if (c == '(') {
                ++m_pos;
                Sub n = ternary();
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
                const std::string literal(begin, static_cast<std::size_t>(end - begin));
                m_pos += literal.size();
                // "7.0 / 2" is real division; "7 / 2" is C integer division.
                const bool real = literal.find_first_of(".eE") != std::string::npos;
                return make(Expr::Node::Kind::Number, real ? "real" : "", {}, v);
            }
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                const std::size_t start = m_pos;
                while (
                    m_pos < m_s.size() && (std::isalnum(static_cast<unsigned char>(m_s[m_pos])) || m_s[m_pos] == '_'))
                    ++m_pos;
                std::string id = m_s.substr(start, m_pos - start);
                if (eat("(")) {
                    std::vector<Sub> args;
                    if (!eat(")")) {
                        do {
                            args.push_back(ternary());
                        } while (eat(","));
                        if (!eat(")"))
                            fail("expected ')' after arguments of " + abbreviate(id));
                    }
                    const auto it = kArity.find(id);
                    if (it == kArity.end())
                        fail("unknown function '" + abbreviate(id) + "'");
                    if (it->second != args.size())
                        fail(id + " takes " + std::to_string(it->second) + " arguments");
                    return make(Expr::Node::Kind::Call, id, std::move(args));
                }
                if (kArity.count(id))
                    fail("'" + id + "' is a function: call it as " + id + "(...)");
                if (id == "true")
                    return make(Expr::Node::Kind::Number, {}, {}, 1);
                if (id == "false")
                    return make(Expr::Node::Kind::Number, {}, {}, 0);
                return make(Expr::Node::Kind::Var, id, {});
            }
            fail("unexpected '" + std::string(1, c) + "'");
        }

        const std::string& m_s;
        std::size_t m_pos = 0;
        int m_nesting = 0;
    };

    bool isInteger(double v)
    {
        return std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15;
    }

    struct Value {
        double v = 0;
        bool real = false; // produced by a real literal or real-valued function
    };

    Value eval(const Expr::Node& n, const Bindings& vars, const std::string& text)
    {
        using K = Expr::Node::Kind;
        auto err = [&](const std::string& what) { return ExprError("expression '" + abbreviate(text) + "': " + what); };
        switch (n.kind) {
        case K::Number:
            return { n.number, n.name == "real" };
        case K::Var: {
            const auto it = vars.find(n.name);
            if (it == vars.end())
                throw err("unknown name '" + abbreviate(n.name) + "'");
            return { it->second, !isInteger(it->second) };
        }
        case K::Unary: {
            const Value a = eval(*n.args[0], vars, text);
            if (n.name == "-")
                return { -a.v, a.real };
            return { a.v == 0.0 ? 1.0 : 0.0, false };
        }
        case K::Ternary:
            return eval(*n.args[0], vars, text).v != 0.0 ? eval(*n.args[1], vars, text) : eval(*n.args[2], vars, text);
        case K::Binary: {
            const std::string& op = n.name;
            if (op == "&&")
                return { (eval(*n.args[0], vars, text).v != 0.0 && eval(*n.args[1], vars, text).v != 0.0) ? 1.0 : 0.0 };
            if (op == "||")
                return { (eval(*n.args[0], vars, text).v != 0.0 || eval(*n.args[1], vars, text).v != 0.0) ? 1.0 : 0.0 };
            const Value a = eval(*n.args[0], vars, text);
            const Value b = eval(*n.args[1], vars, text);
            const bool real = a.real || b.real;
            if (op == "+")
                return { a.v + b.v, real };
            if (op == "-")
                return { a.v - b.v, real };
            if (op == "*")
                return { a.v * b.v, real };
            if (op == "/" || op == "%") {
                if (b.v == 0.0)
                    throw err("division by zero");
                if (!real && isInteger(a.v) && isInteger(b.v)) {
                    const auto ia = static_cast<std::int64_t>(a.v), ib = static_cast<std::int64_t>(b.v);
                    return { static_cast<double>(op == "/" ? ia / ib : ia % ib) };
                }
                return { op == "/" ? a.v / b.v : std::fmod(a.v, b.v), true };
            }
            if (op == "==")
                return { a.v == b.v ? 1.0 : 0.0 };
            if (op == "!=")
                return { a.v != b.v ? 1.0 : 0.0 };
            if (op == "<")
                return { a.v < b.v ? 1.0 : 0.0 };
            if (op == "<=")
                return { a.v <= b.v ? 1.0 : 0.0 };
            if (op == ">")
                return { a.v > b.v ? 1.0 : 0.0 };
            if (op == ">=")
                return { a.v >= b.v ? 1.0 : 0.0 };
            throw err("bad operator " + op);
        }
        case K::Call: {
            std::vector<double> v;
            bool real = false;
            for (const auto& a : n.args) {
                const Value x = eval(*a, vars, text);
                v.push_back(x.v);
                real = real || x.real;
            }
            const std::string& f = n.name;
            if (f == "min")
                return { std::min(v[0], v[1]), real };
            if (f == "max")
                return { std::max(v[0], v[1]), real };
            if (f == "ceil_div" || f == "div") {
                if (v[1] == 0.0)
                    throw err("division by zero in " + f);
                return { f == "div" ? std::floor(v[0] / v[1]) : std::ceil(v[0] / v[1]) };
            }
            if (f == "pow")
                return { std::pow(v[0], v[1]), real || v[1] < 0 };
            if (f == "floor")
                return { std::floor(v[0]) };
            if (f == "ceil")
                return { std::ceil(v[0]) };
            if (f == "round")
                return { std::round(v[0]) };
            if (f == "abs")
                return { std::fabs(v[0]), real };
            if (f == "log2")
                return { std::log2(v[0]), true };
            if (f == "sqrt")
                return { std::sqrt(v[0]), true };
            if (f == "next_pow2") {
                double p = 1;
                while (p < v[0])
                    p *= 2;
                return { p };
            }
            throw err("unknown function " + f);
        }
        }
        throw err("corrupt expression");
    }

    void collect(const Expr::Node& n, std::set<std::string>& out)
    {
        if (n.kind == Expr::Node::Kind::Var)
            out.insert(n.name);
        for (const auto& a : n.args)
            collect(*a, out);
    }

} // namespace

Expr Expr::parse(const std::string& text)
{
    if (text.size() > kMaxLength)
        throw ExprError("expression '" + abbreviate(text) + "' is " + std::to_string(text.size())
            + " characters, more than the limit of " + std::to_string(kMaxLength));
    Expr e;
    e.m_text = text;
    Parser p(e.m_text);
    e.m_root = p.parseAll();
    return e;
}

bool Expr::isVariableName(const std::string& name)
{
    if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
        return false;
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
            return false;
    return !kArity.count(name) && name != "true" && name != "false";
}

double Expr::evaluate(const Bindings& vars) const
{
    if (!m_root)
        throw ExprError("empty expression");
    return eval(*m_root, vars, m_text).v;
}

std::int64_t Expr::evaluateInt(const Bindings& vars) const
{
    const double v = evaluate(vars);
    if (!isInteger(v))
        throw ExprError("expression '" + abbreviate(m_text) + "' is not an integer here (" + std::to_string(v) + ")");
    return static_cast<std::int64_t>(v);
}

std::vector<std::string> Expr::identifiers() const
{
    std::set<std::string> ids;
    if (m_root)
        collect(*m_root, ids);
    return { ids.begin(), ids.end() };
}

} // namespace kl
