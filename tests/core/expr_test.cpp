#include "core/expr.h"

#include <gtest/gtest.h>

using kl::Expr;
using kl::ExprError;

TEST(Expr, PrecedenceAndIntegerDivision)
{
    const kl::Bindings b = { { "T", 4096 }, { "BLOCK", 256 }, { "H", 8192 } };
    EXPECT_EQ(Expr::parse("1 + 2 * 3").evaluateInt({}), 7);
    EXPECT_EQ(Expr::parse("(1 + 2) * 3").evaluateInt({}), 9);
    EXPECT_EQ(Expr::parse("7 / 2").evaluateInt({}), 3); // C semantics on integers
    EXPECT_EQ(Expr::parse("-7 / 2").evaluateInt({}), -3);
    EXPECT_EQ(Expr::parse("7 % 3").evaluateInt({}), 1);
    EXPECT_EQ(Expr::parse("ceil_div(T, BLOCK)").evaluateInt(b), 16);
    EXPECT_EQ(Expr::parse("ceil_div(T + 1, BLOCK)").evaluateInt(b), 17);
    EXPECT_EQ(Expr::parse("min(H / 8, 1024)").evaluateInt(b), 1024);
    EXPECT_EQ(Expr::parse("next_pow2(100)").evaluateInt({}), 128);
    EXPECT_DOUBLE_EQ(Expr::parse("7.0 / 2").evaluate({}), 3.5);
}

TEST(Expr, LogicAndComparisons)
{
    const kl::Bindings b = { { "BLOCK", 256 }, { "VEC", 8 }, { "H", 8192 } };
    EXPECT_TRUE(Expr::parse("H % (BLOCK * VEC) == 0").evaluateBool(b));
    EXPECT_FALSE(Expr::parse("BLOCK > 256 || VEC < 8").evaluateBool(b));
    EXPECT_TRUE(Expr::parse("BLOCK >= 256 && !(VEC != 8)").evaluateBool(b));
    EXPECT_EQ(Expr::parse("BLOCK <= 128 ? 1 : 2").evaluateInt(b), 2);
    EXPECT_TRUE(Expr::parse("1 <= 2").evaluateBool({}));
    EXPECT_FALSE(Expr::parse("2 <= 1").evaluateBool({}));
}

TEST(Expr, ErrorsNameTheProblem)
{
    try {
        Expr::parse("1 + * 2");
        FAIL() << "expected a parse error";
    } catch (const ExprError& e) {
        EXPECT_NE(std::string(e.what()).find("column"), std::string::npos) << e.what();
    }
    EXPECT_THROW(Expr::parse("foo(1)"), ExprError);
    EXPECT_THROW(Expr::parse("min(1)"), ExprError);
    EXPECT_THROW(Expr::parse("(1 + 2"), ExprError);
    EXPECT_THROW(Expr::parse("T / 0").evaluate({ { "T", 1 } }), ExprError);
    try {
        Expr::parse("T * X").evaluate({ { "T", 1 } });
        FAIL();
    } catch (const ExprError& e) {
        EXPECT_NE(std::string(e.what()).find("'X'"), std::string::npos);
    }
    EXPECT_THROW(Expr::parse("T / 3.0").evaluateInt({ { "T", 4 } }), ExprError);
}

TEST(Expr, IdentifiersAreCollected)
{
    const auto ids = Expr::parse("ceil_div(T, BLOCK) * max(H, VEC)").identifiers();
    EXPECT_EQ(ids, (std::vector<std::string> { "BLOCK", "H", "T", "VEC" }));
}

namespace {
std::string repeat(const std::string& s, std::size_t n)
{
    std::string out;
    out.reserve(s.size() * n);
    for (std::size_t i = 0; i < n; ++i)
        out += s;
    return out;
}

std::string parseError(const std::string& text)
{
    try {
        Expr::parse(text);
    } catch (const ExprError& e) {
        return e.what();
    }
    return {};
}
} // namespace

// qa rows 25, 26, 51, 52, 69: 5000 and 200000 nested parentheses overflowed the stack of the recursive parser.
TEST(ExprLimits, DeepParenthesesAreAnErrorNamingTheLimit)
{
    for (std::size_t depth : { 5000u, 200000u }) {
        const std::string text = repeat("(", depth) + "T" + repeat(")", depth);
        const std::string text2 = text.size() > Expr::kMaxLength ? text.substr(0, Expr::kMaxLength) : text;
        const std::string why = parseError(text2);
        EXPECT_NE(why.find("nested more than 256 levels deep"), std::string::npos) << why.substr(0, 300);
        EXPECT_LT(why.size(), 400u) << "the expression is abbreviated in the message";
    }
    const std::string ok = repeat("(", 200) + "T" + repeat(")", 200);
    EXPECT_EQ(Expr::parse(ok).evaluateInt({ { "T", 7 } }), 7);
}

// qa rows 17, 75, 134: a 500000-term sum made a left-deep tree that the evaluator and destructor recursed over.
TEST(ExprLimits, LongOperatorChainsAreAnError)
{
    const std::string sum = "T" + repeat("+T", 20000);
    const std::string why = parseError(sum);
    EXPECT_NE(why.find("more than 256 levels deep"), std::string::npos) << why.substr(0, 300);
    EXPECT_EQ(Expr::parse("T" + repeat("+T", 200)).evaluateInt({ { "T", 2 } }), 402);
}

// qa rows 17, 45, 59: a megabyte of text is refused by its length before any parsing.
TEST(ExprLimits, TextLongerThan64KiBIsAnErrorNamingTheLimit)
{
    const std::string why = parseError(repeat("-", 1000000) + "T");
    EXPECT_NE(why.find("1000001 characters, more than the limit of 65536"), std::string::npos) << why.substr(0, 300);
    EXPECT_LT(why.size(), 300u);
    const std::string spaces = repeat(" ", 60000) + "1";
    EXPECT_EQ(Expr::parse(spaces).evaluateInt({}), 1);
}

// qa rows 45, 59: chains of unary minus recursed once per sign.
TEST(ExprLimits, UnaryChainsAreBounded)
{
    EXPECT_NE(parseError(repeat("-", 60000) + "T").find("nested more than 256"), std::string::npos);
    EXPECT_NE(parseError(repeat("!", 300) + "T").find("nested more than 256"), std::string::npos);
    EXPECT_EQ(Expr::parse(repeat("- ", 100) + "T").evaluateInt({ { "T", 3 } }), 3);
    EXPECT_NE(
        parseError(repeat("min(1, ", 300) + "1" + repeat(")", 300)).find("nested more than 256"), std::string::npos);
    EXPECT_NE(parseError(repeat("1 ? 1 : ", 300) + "1").find("nested more than 256"), std::string::npos);
}

// Found by the expressions fuzz target: "floor + 1" parsed "floor" as a variable no problem can bind.
TEST(Expr, FunctionNamesAreNotVariables)
{
    EXPECT_NE(parseError("floor + 1").find("'floor' is a function: call it as floor(...)"), std::string::npos);
    EXPECT_FALSE(Expr::isVariableName("min"));
    EXPECT_FALSE(Expr::isVariableName("true"));
    EXPECT_FALSE(Expr::isVariableName("T T"));
    EXPECT_TRUE(Expr::isVariableName("_T0"));
}
