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
