#include "kernels/export/c_expr.h"

#include "core/errors.h"
#include "core/expr.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace kl::exporter {

namespace {

    using Node = Expr::Node;

    // core's tree, with a parse error as an InputError naming what the expression is for.
    Expr parseTree(const std::string& text, const std::string& what)
    {
        try {
            return Expr::parse(text);
        } catch (const ExprError& e) {
            throw InputError(what + ": " + e.what());
        }
    }

    std::string number(double v)
    {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", v);
        std::string s = buf;
        if (s.find_first_of(".eEni") == std::string::npos)
            s += ".0";
        return s;
    }

    std::string emit(const Node& n, const IdentifierMap& ids);

    // A C int expression, 1 when core's evaluator would carry the value as real (a literal with a point, a variable
    // holding a non-integer, sqrt, log2, a negative power, real division): "/" and "%" divide as integers only
    // when neither operand is real, exactly as kl::Expr does.
    std::string realC(const Node& n, const IdentifierMap& ids)
    {
        using K = Node::Kind;
        auto any = [&](const std::vector<std::shared_ptr<const Node>>& args) {
            std::string s = "(0";
            for (const auto& a : args)
                s += " || " + realC(*a, ids);
            return s + ")";
        };
        switch (n.kind) {
        case K::Number:
            return n.name == "real" ? "1" : "0";
        case K::Var:
            return "(!klx_is_int(" + ids(n.name) + "))";
        case K::Unary:
            return n.name == "-" ? realC(*n.args[0], ids) : "0";
        case K::Ternary:
            return "((" + emit(*n.args[0], ids) + ") != 0.0 ? " + realC(*n.args[1], ids) + " : "
                + realC(*n.args[2], ids) + ")";
        case K::Binary: {
            const std::string& op = n.name;
            if (op == "+" || op == "-" || op == "*")
                return any(n.args);
            if (op == "/" || op == "%")
                return "(!klx_int_division(" + emit(*n.args[0], ids) + ", " + emit(*n.args[1], ids) + ", " + any(n.args)
                    + "))";
            return "0";
        }
        case K::Call:
            if (n.name == "min" || n.name == "max" || n.name == "abs")
                return any(n.args);
            if (n.name == "log2" || n.name == "sqrt")
                return "1";
            if (n.name == "pow")
                return "(" + any(n.args) + " || (" + emit(*n.args[1], ids) + ") < 0.0)";
            return "0";
        }
        return "0";
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
            if (op == "/" || op == "%")
                return std::string(op == "/" ? "klx_div(" : "klx_mod(") + a + ", " + b + ", " + realC(*n.args[0], ids)
                    + " || " + realC(*n.args[1], ids) + ")";
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

} // namespace

std::string toCExpression(const std::string& text, const IdentifierMap& ids, const std::string& what)
{
    const Expr e = parseTree(text, what);
    return emit(*e.root(), ids);
}

std::vector<std::string> expressionIdentifiers(const std::string& text)
{
    return parseTree(text, "expression").identifiers();
}

bool asLinearDim(const std::string& text, LinearDim* out)
{
    Expr e;
    try {
        e = Expr::parse(text);
    } catch (const ExprError&) {
        return false;
    }
    const Node* n = e.root();
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
   C integer division and remainder when both operands are integers and neither is real). */
#include <math.h>

static inline int klx_is_int(double v) { return isfinite(v) && v == floor(v) && fabs(v) < 9.0e15; }
static inline int klx_int_division(double a, double b, int real) { return !real && klx_is_int(a) && klx_is_int(b); }
static inline double klx_div(double a, double b, int real)
{
    if (b == 0.0) return NAN;
    if (klx_int_division(a, b, real)) return (double)((long long)a / (long long)b);
    return a / b;
}
static inline double klx_mod(double a, double b, int real)
{
    if (b == 0.0) return NAN;
    if (klx_int_division(a, b, real)) return (double)((long long)a % (long long)b);
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
