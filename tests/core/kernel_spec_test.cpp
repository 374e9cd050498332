#include "core/errors.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "tests/support/text_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <limits>
#include <sstream>

namespace {
const char* kSource = R"(#include <cuda_bf16.h>
// @kl:param BLOCK = 256 in [64, 128, 256, 512, 1024]
// @kl:param VEC = 8 in [1, 2, 4, 8]
// @kl:constraint BLOCK * VEC <= 4096
// @kl:constraint H % VEC == 0
// @kl:workspace partial bytes=T*4 init=zero
// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=BLOCK*4 args=(y, x, w, partial, T, H, eps)
extern "C" __global__ void rmsnorm_kernel() {}
)";
}

TEST(KernelSpec, ParsesEveryDirective)
{
    const kl::KernelSpec spec = kl::parseKernelSpec(kSource);
    ASSERT_EQ(spec.params.size(), 2u);
    EXPECT_EQ(spec.params[0].name, "BLOCK");
    EXPECT_EQ(spec.params[0].defaultValue, 256);
    EXPECT_EQ(spec.params[0].values.size(), 5u);
    EXPECT_EQ(spec.params[0].line, 2);
    ASSERT_EQ(spec.constraints.size(), 2u);
    ASSERT_EQ(spec.workspaces.size(), 1u);
    EXPECT_TRUE(spec.workspaces[0].zeroInit);
    EXPECT_EQ(spec.workspaces[0].bytes.evaluateInt({ { "T", 10 } }), 40);
    ASSERT_EQ(spec.launches.size(), 1u);
    const auto& l = spec.launches[0];
    EXPECT_EQ(l.kernel, "rmsnorm_kernel");
    const kl::Bindings b = kl::bindingsFor(spec.defaults(), { { "T", 4096 }, { "H", 8192 } });
    EXPECT_EQ(l.grid[0].evaluateInt(b), 4096);
    EXPECT_EQ(l.grid[1].evaluateInt(b), 1);
    EXPECT_EQ(l.block[0].evaluateInt(b), 256);
    EXPECT_EQ(l.sharedBytes.evaluateInt(b), 1024);
    EXPECT_EQ(l.args, (std::vector<std::string> { "y", "x", "w", "partial", "T", "H", "eps" }));
}

TEST(KernelSpec, SpaceHonoursParameterOnlyConstraints)
{
    const kl::KernelSpec spec = kl::parseKernelSpec(kSource);
    EXPECT_EQ(spec.spaceSize(), 20u);
    const auto space = spec.enumerateSpace();
    // BLOCK * VEC <= 4096 removes (1024, 8); H % VEC needs a shape and is skipped here.
    EXPECT_EQ(space.size(), 19u);
    for (const auto& p : space)
        EXPECT_LE(p.at("BLOCK") * p.at("VEC"), 4096);
    std::string why;
    EXPECT_FALSE(spec.satisfies({ { "BLOCK", 256 }, { "VEC", 8 } }, { { "H", 4100 } }, &why));
    EXPECT_NE(why.find("H % VEC"), std::string::npos) << why;
    EXPECT_TRUE(spec.satisfies({ { "BLOCK", 256 }, { "VEC", 4 } }, { { "H", 4100 } }));
}

TEST(KernelSpec, MalformedAnnotationsNameTheLine)
{
    auto expectLine = [](const std::string& src, const std::string& line) {
        try {
            kl::parseKernelSpec(src);
            FAIL() << "accepted: " << src;
        } catch (const kl::InputError& e) {
            EXPECT_NE(std::string(e.what()).find("line " + line), std::string::npos) << e.what();
        }
    };
    expectLine("// ok\n// @kl:param BLOCK = 7 in [64, 128]\n", "2");
    expectLine("// @kl:param BLOCK 64 [64]\n", "1");
    expectLine("\n\n// @kl:launch k grid=(T block=(1) args=(x)\n", "3");
    expectLine("// @kl:launch k grid=(T) args=(x)\n", "1");
    expectLine("// @kl:launch k grid=(T) block=(1) args=(x[0])\n", "1");
    expectLine("// @kl:frobnicate\n", "1");
    expectLine("// @kl:constraint BLOCK >\n", "1");
    EXPECT_THROW(kl::parseKernelSpec("__global__ void k() {}\n"), kl::InputError);
}

TEST(KernelSpec, BakedParametersComeFirst)
{
    const std::string baked = kl::bakeParameters(kSource, { { "BLOCK", 128 }, { "VEC", 4 } });
    EXPECT_LT(baked.find("#define BLOCK 128"), baked.find("#include"));
    EXPECT_NE(baked.find("#define VEC 4"), std::string::npos);
}

namespace {
const std::string kProblemsDir = std::string(KL_SOURCE_DIR) + "/kernels/problems/";

std::string rmsnormTemplate()
{
    return kl::test::readTextFile(kProblemsDir + "rmsnorm/template.cu");
}

std::string replaced(std::string s, const std::string& from, const std::string& to)
{
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
        s.replace(at, from.size(), to);
    return s;
}

std::string specError(const std::string& source, const kl::Problem& problem)
{
    try {
        kl::parseKernelSpec(source, problem);
    } catch (const kl::InputError& e) {
        return e.what();
    }
    return {};
}

int lineOf(const std::string& source, const std::string& text)
{
    const auto at = source.find(text);
    return 1 + static_cast<int>(std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

const std::string kLaunch = "// @kl:launch rmsnorm_template grid=(";
} // namespace

TEST(KernelSpecAgainstProblem, EveryShippedSourceIsAccepted)
{
    for (const auto& entry : std::filesystem::directory_iterator(kProblemsDir)) {
        if (!std::filesystem::exists(entry.path() / "problem.json"))
            continue;
        const kl::Problem problem = kl::loadProblem(entry.path().string());
        std::vector<std::string> files { problem.referenceFile, problem.baselineFile, problem.templateFile };
        for (const auto& [arch, file] : problem.archTemplates)
            files.push_back(file);
        for (const auto& file : files) {
            const std::string source = kl::test::readTextFile((entry.path() / file).string());
            EXPECT_EQ(specError(source, problem), "") << entry.path() / file;
        }
    }
}

// qa rows 85, 86 (issue 13 principle 7): prose that mentions "@kl:" inside a comment is not a directive.
TEST(KernelSpecDirectives, ProseMentioningKlInACommentIsNotADirective)
{
    const std::string prose = "// Note: the @kl:launch line above computes the grid from H.\n"
                              "// TODO(me@kl:launch-team)\n"
                              "  //   see @kl:param below\n";
    const kl::KernelSpec spec = kl::parseKernelSpec(prose + kSource);
    EXPECT_EQ(spec.params.size(), 2u);
    EXPECT_EQ(spec.launches.size(), 1u);
    // A directive may be indented and may follow "//" without a space.
    const kl::KernelSpec indented = kl::parseKernelSpec("    //@kl:param X = 1 in [1, 2]\n" + std::string(kSource));
    EXPECT_NE(indented.param("X"), nullptr);
    // A misspelt directive that starts the comment is still an error.
    EXPECT_THROW(kl::parseKernelSpec("// @kl:lauch foo\n" + std::string(kSource)), kl::InputError);
}

// qa rows 58, 237: a constraint naming an unknown identifier was skipped forever (the tuner then proposed
// configurations violating the intended MINTPR <= THREADS).
TEST(KernelSpecAgainstProblem, ConstraintNamingAnUnknownIdentifierIsAnErrorNamingTheLine)
{
    const kl::Problem problem = kl::loadProblem(kProblemsDir + "rmsnorm");
    const std::string typo = replaced(rmsnormTemplate(), "MINTPR <= THREADS", "MINTPR <= THREDS");
    const std::string why = specError(typo, problem);
    const std::string line = "line " + std::to_string(lineOf(typo, "THREDS")) + ": @kl:constraint";
    EXPECT_EQ(why.rfind(line, 0), 0u) << why;
    EXPECT_NE(why.find("names 'THREDS', which is neither a parameter"), std::string::npos) << why;
    EXPECT_NE(why.find("THREADS"), std::string::npos) << "lists the declared parameters: " << why;

    const std::string nope = replaced(rmsnormTemplate(), "VEC * CACHE <= 128", "VEC * NOPE <= 128");
    EXPECT_NE(specError(nope, problem).find("names 'NOPE'"), std::string::npos);
    // The problem's dims are known names.
    EXPECT_EQ(specError(replaced(rmsnormTemplate(), "VEC * CACHE <= 128", "VEC * CACHE <= H"), problem), "");
}

// qa row 90: a launch line naming an unknown identifier compiled with exit 0.
TEST(KernelSpecAgainstProblem, LaunchLineNamingAnUnknownIdentifierIsAnError)
{
    const kl::Problem problem = kl::loadProblem(kProblemsDir + "rmsnorm");
    const std::string source = rmsnormTemplate();
    const std::string launch = source.substr(source.find(kLaunch));
    const std::string line = launch.substr(0, launch.find('\n'));
    const std::string bogus
        = replaced(source, line, kLaunch + "ceil_div(T, BOGUS)) block=(THREADS) smem=0 args=(y, x, w, T, H, eps)");
    const std::string why = specError(bogus, problem);
    EXPECT_NE(why.find("@kl:launch grid 'ceil_div(T, BOGUS)' names 'BOGUS'"), std::string::npos) << why;
    EXPECT_EQ(why.rfind("line " + std::to_string(lineOf(bogus, "BOGUS")) + ":", 0), 0u) << why;

    const std::string smem
        = replaced(source, line, kLaunch + "T) block=(THREADS) smem=(Q*4) args=(y, x, w, T, H, eps)");
    EXPECT_NE(specError(smem, problem).find("@kl:launch smem 'Q*4' names 'Q'"), std::string::npos);
}

// qa row 72: an argument that is no tensor, workspace, dim, scalar or parameter was only caught on the GPU.
TEST(KernelSpecAgainstProblem, LaunchArgumentThatNamesNothingIsAnError)
{
    const kl::Problem problem = kl::loadProblem(kProblemsDir + "rmsnorm");
    const std::string why
        = specError(replaced(rmsnormTemplate(), "args=(y, x, w, T, H, eps)", "args=(y, x, w, T, H, zzz)"), problem);
    EXPECT_NE(
        why.find(
            "@kl:launch argument 'zzz' is not a tensor, workspace, tensor map, dim, scalar or parameter of rmsnorm"),
        std::string::npos)
        << why;
}

// qa row 74: args=(y, x) for a 6-parameter kernel compiled with exit 0.
TEST(KernelSpecAgainstProblem, LaunchArgumentCountMustMatchTheKernelSignature)
{
    const kl::Problem problem = kl::loadProblem(kProblemsDir + "rmsnorm");
    const std::string source = replaced(rmsnormTemplate(), "args=(y, x, w, T, H, eps)", "args=(y, x)");
    const std::string why = specError(source, problem);
    EXPECT_NE(why.find("@kl:launch passes 2 arguments to rmsnorm_template, whose parameter list (line "
                  + std::to_string(lineOf(source, "rmsnorm_template(")) + ") declares 6"),
        std::string::npos)
        << why;
}

TEST(KernelSpecAgainstProblem, SignatureIsReadFromCodeNotCommentsStringsOrDeclarationsOfOtherKernels)
{
    kl::Problem problem;
    problem.name = "p";
    problem.dims.push_back({ "N", 1, 100, 1, true });
    problem.tensors.push_back({ "y", kl::DType::F32, {}, kl::TensorRole::Output, 1.0 });
    const std::string annotations = "// @kl:launch k grid=(N) block=(32) args=(y, N)\n";
    const std::string decoys = "// k(int a, int b, int c) in a comment\n"
                               "/* __global__ void k(int a) */\n"
                               "const char* s = \"__global__ void k(int)\";\n"
                               "#define K_SIG(a) k(a)\n"
                               "__device__ int k_helper(int a, int b, int c);\n";
    const std::string two = "template <typename T, int B> __global__ void\n"
                            "k(T* __restrict__ y, Pair<int, float> n) {}\n";
    EXPECT_EQ(specError(annotations + decoys + two, problem), "");
    const std::string three = "extern \"C\" __global__ void __launch_bounds__(256, 2) k(float* y, int n, int m) {}\n";
    EXPECT_NE(specError(annotations + decoys + three, problem).find("declares 3"), std::string::npos);
    // A name made by a macro cannot be read from the code: NVRTC reports what is wrong there.
    EXPECT_EQ(specError(annotations + "#define NAME k\n__global__ void NAME(float* y) {}\n", problem), "");
    EXPECT_NE(specError(annotations + "__global__ void k(void) {}\n", problem).find("declares 0"), std::string::npos);
}

// qa rows 93, 94, 95: --params values that are undeclared, outside the declared set or violate a constraint.
TEST(KernelSpecParams, ValuesFromOutsideMustBeDeclaredAndSatisfyTheConstraints)
{
    const kl::KernelSpec spec = kl::parseKernelSpec(rmsnormTemplate());
    auto error = [&](const kl::ParamValues& p) {
        try {
            spec.requireValidParams(p);
        } catch (const kl::InputError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_EQ(error({}), "");
    EXPECT_EQ(error({ { "VEC", 4 }, { "CACHE", 16 } }), "");
    EXPECT_NE(error({ { "BOGUS", 3 } }).find("parameter 'BOGUS' is not declared (declared: THREADS, VEC, CACHE"),
        std::string::npos)
        << error({ { "BOGUS", 3 } });
    EXPECT_NE(
        error({ { "VEC", 3 } }).find("VEC=3 is not one of the values declared on line 8 [2, 4, 8]"), std::string::npos)
        << error({ { "VEC", 3 } });
    EXPECT_NE(error({ { "VEC", 8 }, { "CACHE", 32 } }).find("CACHE=32 is not one of the values"), std::string::npos);
    const std::string violated = error({ { "MINTPR", 256 }, { "THREADS", 64 } });
    EXPECT_NE(violated.find("constraint 'MINTPR <= THREADS' (line 13) does not hold"), std::string::npos) << violated;
    EXPECT_NE(violated.find("MINTPR=256"), std::string::npos) << violated;
}

// qa rows 69, 75, 133, 134, 211: a hostile expression in an annotation is an error naming the line.
TEST(KernelSpecLimits, DeepOrLongAnnotationExpressionsAreAnErrorNamingTheLine)
{
    const std::string deep = std::string(6000, '(') + "VEC * CACHE <= 128" + std::string(6000, ')');
    const std::string source = replaced(rmsnormTemplate(), "VEC * CACHE <= 128", deep);
    try {
        kl::parseKernelSpec(source);
        FAIL() << "accepted 6000 nested parentheses";
    } catch (const kl::InputError& e) {
        const std::string why = e.what();
        EXPECT_EQ(why.rfind("line 14: @kl:constraint: expression '((((", 0), 0u) << why.substr(0, 200);
        EXPECT_NE(why.find("nested more than 256 levels deep"), std::string::npos) << why.substr(0, 400);
        EXPECT_LT(why.size(), 400u);
    }
    std::string terms;
    for (int i = 0; i < 600000; ++i)
        terms += "VEC+";
    const std::string longSource = replaced(rmsnormTemplate(), "VEC * CACHE <= 128", terms + "0 <= 128");
    EXPECT_THROW(kl::parseKernelSpec(longSource), kl::InputError);
}

// qa row 57: "@kl:constraint VEC > 1000" with the defaults violating it compiled with exit 0.
TEST(KernelSpecAgainstProblem, DefaultsMustSatisfyTheParameterConstraints)
{
    const kl::Problem problem = kl::loadProblem(kProblemsDir + "rmsnorm");
    const std::string source = replaced(rmsnormTemplate(), "VEC * CACHE <= 128", "VEC > 1000");
    const std::string why = specError(source, problem);
    EXPECT_EQ(why, "line 14: @kl:constraint 'VEC > 1000' at the parameters' defaults: does not hold") << why;
    // A constraint that names a dim may exclude the defaults at some shapes: the tuner filters per shape.
    EXPECT_EQ(specError(replaced(rmsnormTemplate(), "VEC * CACHE <= 128", "H % (VEC * CACHE * 64) == 0"), problem), "");
}

// qa rows 66, 67: grid=(T / (VEC - VEC)) and grid=(0) compiled with exit 0.
TEST(KernelSpecAgainstProblem, LaunchGeometryAtTheDefaultsIsALaunchAtEveryDeclaredShape)
{
    const kl::Problem problem = kl::loadProblem(kProblemsDir + "rmsnorm");
    const std::string source = rmsnormTemplate();
    const std::string launch = source.substr(source.find(kLaunch));
    const std::string line = launch.substr(0, launch.find('\n'));
    const int lineNo = lineOf(source, kLaunch);
    const std::string byZero = specError(
        replaced(source, line, kLaunch + "T / (VEC - VEC)) block=(THREADS) args=(y, x, w, T, H, eps)"), problem);
    EXPECT_EQ(
        byZero.rfind("line " + std::to_string(lineNo) + ": @kl:launch grid at H=8192,T=16 with the defaults: ", 0), 0u)
        << byZero;
    EXPECT_NE(byZero.find("division by zero"), std::string::npos) << byZero;
    const std::string zero
        = specError(replaced(source, line, kLaunch + "0) block=(THREADS) args=(y, x, w, T, H, eps)"), problem);
    // A grid of 0 skips a launch; a plan whose every launch is skipped at a shape launches nothing there.
    EXPECT_EQ(zero.rfind("line " + std::to_string(lineNo)
                      + ": @kl:launch: every launch has a grid of 0 at H=8192,T=16 with the defaults",
                  0),
        0u)
        << zero;
    const std::string negative
        = specError(replaced(source, line, kLaunch + "0 - T) block=(THREADS) args=(y, x, w, T, H, eps)"), problem);
    EXPECT_NE(
        negative.find("@kl:launch grid '0 - T' is -16 at H=8192,T=16 with the defaults; a launch needs at least 0"),
        std::string::npos)
        << negative;
    // A second launch not made at any declared shape needs no grid its cluster shape divides.
    EXPECT_EQ(specError(source
                      + "// @kl:launch rmsnorm_template grid=(T > 0 ? 0 : 2) block=(32) cluster=(2, 1, 1) "
                        "args=(y, x, w, T, H, eps)\n",
                  problem),
        "");
}

// qa rows 77, 83, 84: a NUL byte cut the source silently, "010" was octal 8, a 2^96 space wrapped spaceSize().
TEST(KernelSpec, NulBytesOctalLookingValuesAndHugeSpaces)
{
    std::string withNul = std::string("// a comment with a ") + '\0' + " byte\n" + kSource;
    try {
        kl::parseKernelSpec(withNul);
        FAIL() << "accepted a NUL byte";
    } catch (const kl::InputError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("line 1: a NUL byte", 0), 0u) << e.what();
    }
    const kl::KernelSpec decimal
        = kl::parseKernelSpec("// @kl:param W = 010 in [2, 4, 010, 0x10]\n" + std::string(kSource));
    EXPECT_EQ(decimal.param("W")->defaultValue, 10);
    EXPECT_EQ(decimal.param("W")->values, (std::vector<std::int64_t> { 2, 4, 10, 16 }));
    std::string huge;
    std::string values;
    for (int v = 0; v < 4096; ++v)
        values += (v ? ", " : "") + std::to_string(v);
    for (int p = 0; p < 8; ++p)
        huge += "// @kl:param P" + std::to_string(p) + " = 0 in [" + values + "]\n";
    EXPECT_EQ(kl::parseKernelSpec(huge + kSource).spaceSize(), std::numeric_limits<std::size_t>::max());
}
