// Each static rule on small, focused sources: what it must catch, and the honest look-alikes it must not.
#include "kernels/referee/referee.h"
#include "kernels/referee/source_tokens.h"

#include <algorithm>
#include <gtest/gtest.h>

namespace {

using kl::referee::checkSource;
using kl::referee::TokenKind;

kl::Problem bf16Problem()
{
    kl::Problem p;
    p.name = "rmsnorm";
    p.dims = { { "T", 1, 65536, 1, true }, { "H", 1024, 16384, 8, true } };
    p.tensors = { { "x", kl::DType::BF16, { kl::Expr::parse("T"), kl::Expr::parse("H") }, kl::TensorRole::Input, 1.0 },
        { "w", kl::DType::BF16, { kl::Expr::parse("H") }, kl::TensorRole::Input, 1.0 },
        { "y", kl::DType::BF16, { kl::Expr::parse("T"), kl::Expr::parse("H") }, kl::TensorRole::Output, 1.0 } };
    return p;
}

kl::Problem f16Problem()
{
    kl::Problem p = bf16Problem();
    for (auto& t : p.tensors)
        t.dtype = kl::DType::F16;
    return p;
}

std::vector<std::string> rulesOf(const std::vector<kl::VerdictReason>& rs)
{
    std::vector<std::string> out;
    for (const auto& r : rs)
        out.push_back(r.rule);
    return out;
}

bool has(const std::vector<kl::VerdictReason>& rs, const std::string& rule, int line = 0)
{
    return std::any_of(rs.begin(), rs.end(),
        [&](const kl::VerdictReason& r) { return r.rule == rule && (line == 0 || r.line == line); });
}

std::string describe(const std::vector<kl::VerdictReason>& rs)
{
    std::string s;
    for (const auto& r : rs)
        s += r.rule + "@" + std::to_string(r.line) + ": " + r.message + "\n";
    return s.empty() ? "(no reasons)" : s;
}

TEST(Tokenizer, DropsCommentsKeepsStringsAndLines)
{
    const auto toks
        = kl::referee::tokenize("int a; // clock64()\n/* __trap()\n */ \"clock64\" x\n#include <cuda_fp16.h>\nb");
    std::vector<std::string> idents;
    for (const auto& t : toks)
        if (t.kind == TokenKind::Identifier)
            idents.push_back(t.text + "@" + std::to_string(t.line));
    EXPECT_EQ(idents, (std::vector<std::string> { "int@1", "a@1", "x@3", "b@5" }));
    const auto str = std::find_if(toks.begin(), toks.end(), [](const auto& t) { return t.kind == TokenKind::String; });
    ASSERT_NE(str, toks.end());
    EXPECT_EQ(str->text, "clock64");
    EXPECT_EQ(str->line, 3);
    const auto header
        = std::find_if(toks.begin(), toks.end(), [](const auto& t) { return t.kind == TokenKind::HeaderName; });
    ASSERT_NE(header, toks.end());
    EXPECT_EQ(header->text, "cuda_fp16.h");
    EXPECT_EQ(header->line, 4);
}

TEST(Tokenizer, LineSplicesKeepPhysicalLineNumbers)
{
    const auto toks = kl::referee::tokenize("#define X \\\n  clock64()\nint y;");
    const auto clock = std::find_if(toks.begin(), toks.end(), [](const auto& t) { return t.text == "clock64"; });
    ASSERT_NE(clock, toks.end());
    EXPECT_EQ(clock->line, 2); // the physical line the user sees, though it belongs to line 1's directive
    const auto y = std::find_if(toks.begin(), toks.end(), [](const auto& t) { return t.text == "y"; });
    EXPECT_EQ(y->line, 3);
}

TEST(StaticRules, MutableDeviceGlobalIsRejectedConstIsFine)
{
    const std::string src = "#include <cuda_bf16.h>\n"
                            "__device__ int calls;\n" // 2 mutable
                            "__device__ const float kTable[4] = {1, 2, 3, 4};\n" // 3 fine
                            "__constant__ float kScale[2];\n" // 4 fine
                            "__device__ __managed__ float cache[1024];\n" // 5 mutable
                            "static __device__ unsigned long long seen = 0;\n" // 6 mutable
                            "__device__ const float* table_ptr;\n" // 7 mutable pointer
                            "__device__ float* const fixed_ptr = nullptr;\n" // 8 const pointer: fine
                            "__device__ constexpr int kWarp = 32;\n" // 9 fine
                            "__device__ __forceinline__ float sq(float v) { return v * v; }\n" // 10 a function
                            "__device__ __align__(16) float staging[8];\n" // 11 mutable
                            "__device__ int brace{3};\n"; // 12 mutable
    const auto rs = checkSource(src, bf16Problem());
    for (int line : { 2, 5, 6, 7, 11, 12 })
        EXPECT_TRUE(has(rs, "static.mutable-global", line)) << line << "\n" << describe(rs);
    for (int line : { 3, 4, 8, 9, 10 })
        EXPECT_FALSE(has(rs, "static.mutable-global", line)) << line << "\n" << describe(rs);
    for (const auto& r : rs)
        EXPECT_TRUE(r.blocking);
}

TEST(StaticRules, MacrosAndAttributesDoNotHideGlobals)
{
    const std::string src
        = "#define DEV __device__\n"
          "#define KEEP(type, name) __device__ type name\n"
          "DEV int hidden;\n" // 3
          "KEEP(float, kept)[16];\n" // 4
          "__attribute__((device)) unsigned spelled_out;\n" // 5
          "#define LIMIT 4096\n"
          "__global__ void k(float* y, int T) { if (T == LIMIT) y[0] = hidden + kept[0] + spelled_out; }\n"; // 7
    const auto rs = checkSource(src, bf16Problem());
    for (int line : { 3, 4, 5 })
        EXPECT_TRUE(has(rs, "static.mutable-global", line)) << line << "\n" << describe(rs);
    EXPECT_TRUE(has(rs, "static.shape-special-case", 7)) << describe(rs);
}

TEST(StaticRules, CastingConstAwayFromADeviceGlobalIsState)
{
    const std::string src = "__device__ const unsigned int kSlots[64] = {};\n"
                            "__device__ const float kTable[4] = {1, 2, 3, 4};\n"
                            "__global__ void k(float* y, const float* x) {\n"
                            "    unsigned int* s = const_cast<unsigned int*>(kSlots);\n" // 4
                            "    float* t = (float*)kTable;\n" // 5
                            "    float* u = const_cast<float*>(x);\n" // 6 not a global
                            "    y[0] = kTable[1] + s[0] + t[0] + u[0];\n" // 7 reading is fine
                            "}\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(has(rs, "static.mutable-global", 4)) << describe(rs);
    EXPECT_TRUE(has(rs, "static.mutable-global", 5)) << describe(rs);
    EXPECT_EQ(rs.size(), 2u) << describe(rs);
}

TEST(StaticRules, FunctionScopeStaticIsStateSharedStaticIsNot)
{
    const std::string src = "__global__ void k(float* y) {\n"
                            "    static int count;\n" // 2
                            "    __shared__ float buf[32];\n"
                            "    static __shared__ float red[32];\n" // 4 fine
                            "    static const int kN = 4;\n" // 5 fine
                            "    y[0] = static_cast<float>(count);\n"
                            "}\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(has(rs, "static.mutable-global", 2)) << describe(rs);
    EXPECT_EQ(rs.size(), 1u) << describe(rs);
}

TEST(StaticRules, NamespacesAndStructsDoNotHideGlobals)
{
    const std::string src
        = "namespace detail {\n"
          "struct Acc { float s; __device__ void add(float v) { s += v; } };\n"
          "__device__ Acc leftover;\n" // 3
          "}\n"
          "extern \"C\" __global__ void k(float* y) { detail::Acc a{0.f}; a.add(1.f); y[0] = a.s; }\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(has(rs, "static.mutable-global", 3)) << describe(rs);
    EXPECT_EQ(rs.size(), 1u) << describe(rs);
}

TEST(StaticRules, TimerReadsInCodeAndPtxButNotInComments)
{
    const std::string src = "// we never call clock64() here\n"
                            "__global__ void k(long long* y) {\n"
                            "    long long t0 = clock64();\n" // 3
                            "    unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(g));\n" // 4
                            "    unsigned c; asm volatile(\"mov.u32 %0, %%clo\" \"ck;\" : \"=r\"(c));\n" // 5 split
                            "    const char* s = \"clock64\";\n" // 6 a string
                            "    y[0] = t0 + g + c + (s != nullptr);\n"
                            "}\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(has(rs, "static.timer-read", 3)) << describe(rs);
    EXPECT_TRUE(has(rs, "static.timer-read", 4)) << describe(rs);
    EXPECT_TRUE(has(rs, "static.timer-read", 5)) << describe(rs);
    EXPECT_FALSE(has(rs, "static.timer-read", 1));
    EXPECT_FALSE(has(rs, "static.timer-read", 6));
}

TEST(StaticRules, EarlyExitInPtxAndIntrinsics)
{
    const std::string src = "__global__ void k(float* y, int T) {\n"
                            "    if (blockIdx.x > 3) asm volatile(\"exit;\");\n" // 2
                            "    if (blockIdx.x == 2) __trap();\n" // 3
                            "    asm volatile(\"{\\n\\t.reg .pred p;\\n\\t@p trap;\\n}\");\n" // 4
                            "    asm volatile(\"ld.global.nc.v4.f32 {%0,%1,%2,%3}, [%4];\" :: \"l\"(y));\n" // 5 fine
                            "    const char* exit_code = \"exit\";\n" // 6 fine: not an instruction
                            "    if (threadIdx.x >= T) return;\n" // 7 fine
                            "    y[threadIdx.x] = exit_code[0];\n"
                            "}\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(has(rs, "static.early-exit", 2)) << describe(rs);
    EXPECT_TRUE(has(rs, "static.early-exit", 3)) << describe(rs);
    EXPECT_TRUE(has(rs, "static.early-exit", 4)) << describe(rs);
    EXPECT_FALSE(has(rs, "static.early-exit", 5)) << describe(rs);
    EXPECT_FALSE(has(rs, "static.early-exit", 6)) << describe(rs);
    EXPECT_FALSE(has(rs, "static.early-exit", 7)) << describe(rs);
}

TEST(StaticRules, IncludeAllowList)
{
    EXPECT_TRUE(kl::referee::includeAllowed("cuda_bf16.h"));
    EXPECT_TRUE(kl::referee::includeAllowed("cooperative_groups/reduce.h"));
    EXPECT_TRUE(kl::referee::includeAllowed("cub/block/block_reduce.cuh"));
    EXPECT_TRUE(kl::referee::includeAllowed("cuda/barrier"));
    EXPECT_FALSE(kl::referee::includeAllowed("cuda/../../etc/passwd"));
    EXPECT_FALSE(kl::referee::includeAllowed("cub/"));
    EXPECT_FALSE(kl::referee::includeAllowed("cuda_runtime.h"));
    EXPECT_TRUE(kl::referee::includeAllowed("cstdint"));
    EXPECT_FALSE(kl::referee::includeAllowed("cstdio"));
    EXPECT_FALSE(kl::referee::includeAllowed("/usr/include/stdio.h"));
    const std::string src = "#include <cuda_fp16.h>\n"
                            "#include \"reference.cu\"\n" // 2
                            "#include <stdio.h>\n" // 3
                            "#  include <cub/cub.cuh>\n"
                            "#define HDR <thread>\n"
                            "#include HDR\n"; // 6
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_EQ(rulesOf(rs), (std::vector<std::string> { "static.include", "static.include", "static.include" }))
        << describe(rs);
    EXPECT_TRUE(has(rs, "static.include", 2));
    EXPECT_TRUE(has(rs, "static.include", 3));
    EXPECT_TRUE(has(rs, "static.include", 6));
}

TEST(StaticRules, HostCodeAndPrintf)
{
    const std::string src = "__global__ void child(float* y) { y[0] = 1; }\n"
                            "__global__ void k(float* y) {\n"
                            "    child<<<1, 1>>>(y);\n" // 3
                            "    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);\n" // 4
                            "    float* tmp = (float*)malloc(16);\n" // 5
                            "    printf(\"%f\\n\", tmp[0]);\n" // 6
                            "    int* p = new int[4];\n" // 7
                            "}\n"
                            "__host__ void setup() {}\n" // 9
                            "__host__ __device__ float twice(float v) { return 2 * v; }\n" // 10 fine
                            "struct NoCopy { NoCopy(const NoCopy&) = delete; };\n"; // 11 fine
    const auto rs = checkSource(src, bf16Problem());
    for (int line : { 3, 4, 5, 7, 9 })
        EXPECT_TRUE(has(rs, "static.host-code", line)) << line << "\n" << describe(rs);
    EXPECT_TRUE(has(rs, "static.printf", 6)) << describe(rs);
    EXPECT_FALSE(has(rs, "static.host-code", 10)) << describe(rs);
    EXPECT_FALSE(has(rs, "static.host-code", 11)) << describe(rs);
}

TEST(StaticRules, TokenPastingIsRejected)
{
    const std::string src = "#define CAT(a, b) a##b\n"
                            "__global__ void k(long long* y) { y[0] = CAT(clo, ck64)(); }\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(has(rs, "static.token-paste", 1)) << describe(rs);
}

TEST(StaticRules, ShapeSpecialCasesAreFlaggedNotRejected)
{
    const std::string src = "__global__ void k(float* y, const float* x, int T, int hidden, float eps) {\n"
                            "    if (T == 4096) { y[0] = 0; }\n" // 2 exact shape
                            "    if (T < 16) return;\n" // 3 skip small
                            "    if (hidden > 8192) { return; }\n" // 4 skip large (kernel param)
                            "    const int rows = T;\n"
                            "    for (int i = 0; i < min(rows, 2048); ++i) y[i] = x[i];\n" // 6 fine: a tile size
                            "    if (gridDim.x != 128) y[1] = 1;\n" // 7 grid is a shape
                            "    if (T == 0) return;\n" // 8 fine: empty guard
                            "    if (threadIdx.x >= T) return;\n" // 9 fine: bounds
                            "    if (hidden <= 2048) { y[2] = x[2]; } else { y[2] = x[3]; }\n" // 10 fine: path choice
                            "    if (T < 16) { y[3] = x[3] * eps; return; }\n" // 11 fine: does work first
                            "    if (BLOCK == 256) y[4] = 0;\n" // 12 fine: a parameter
                            "    int n = hidden % 8 == 0 ? hidden / 8 : hidden;\n" // 13 fine
                            "    y[5] = n;\n"
                            "    switch (hidden) { case 4096: y[6] = 1; break; default: break; }\n" // 15 exact shapes
                            "    switch (threadIdx.x % 4) { case 2: y[7] = 1; break; default: break; }\n" // 16 fine
                            "}\n";
    const auto rs = checkSource(src, bf16Problem());
    for (int line : { 2, 3, 4, 7, 15 })
        EXPECT_TRUE(has(rs, "static.shape-special-case", line)) << line << "\n" << describe(rs);
    for (int line : { 6, 8, 9, 10, 11, 12, 13, 16 })
        EXPECT_FALSE(has(rs, "static.shape-special-case", line)) << line << "\n" << describe(rs);
    for (const auto& r : rs)
        EXPECT_FALSE(r.blocking) << describe(rs);
}

TEST(StaticRules, LowerPrecisionDependsOnTheProblemsDtypes)
{
    const std::string halfMath = "#include <cuda_fp16.h>\n"
                                 "__global__ void k(__nv_bfloat16* y, const __nv_bfloat16* x) {\n"
                                 "    __half h = __float2half(__bfloat162float(x[0]));\n" // 3 fp16 in a bf16 problem
                                 "    y[0] = __float2bfloat16(__half2float(h));\n" // 4 same
                                 "}\n";
    const auto rs = checkSource(halfMath, bf16Problem());
    EXPECT_TRUE(has(rs, "static.lower-precision", 3)) << describe(rs);
    EXPECT_TRUE(has(rs, "static.lower-precision", 4)) << describe(rs);
    for (const auto& r : rs)
        EXPECT_FALSE(r.blocking);
    // The same conversions are the problem's own dtype in an fp16 problem.
    const std::string f16Io = "#include <cuda_fp16.h>\n"
                              "__global__ void k(__half* y, const __half* x) {\n"
                              "    float v = __half2float(x[0]);\n"
                              "    half2 pair = *reinterpret_cast<const half2*>(x);\n"
                              "    y[0] = __float2half(__expf(v) + __low2float(pair));\n"
                              "}\n";
    EXPECT_TRUE(checkSource(f16Io, f16Problem()).empty()) << describe(checkSource(f16Io, f16Problem()));
    // 16-bit arithmetic is flagged even in an fp16 problem: the math contract is fp32.
    const std::string f16Math
        = "#include <cuda_fp16.h>\n"
          "__global__ void k(__half* y, const __half* x) {\n"
          "    y[0] = __hmul(x[0], x[1]);\n" // 3
          "    asm(\"fma.rn.f16x2 %0, %1, %2, %3;\" : \"=r\"(*(unsigned*)y) : \"r\"(0), \"r\"(0), \"r\"(0));\n" // 4
          "}\n";
    const auto rs16 = checkSource(f16Math, f16Problem());
    EXPECT_TRUE(has(rs16, "static.lower-precision", 3)) << describe(rs16);
    EXPECT_TRUE(has(rs16, "static.lower-precision", 4)) << describe(rs16);
    kl::Problem allowed = f16Problem();
    allowed.tags.push_back("allow-half-math");
    EXPECT_TRUE(checkSource(f16Math, allowed).empty()) << describe(checkSource(f16Math, allowed));
}

TEST(StaticRules, SixteenBitOperatorArithmeticIsLowerPrecision)
{
    const std::string src
        = "#include <cuda_bf16.h>\n"
          "__global__ void k(__nv_bfloat16* y, const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* w, int H) {\n"
          "    const int i = threadIdx.x;\n"
          "    y[i] = x[i] * w[i];\n" // 4 bf16 * bf16
          "    __nv_bfloat16 acc = x[0];\n"
          "    acc += x[i];\n" // 6
          "    const __nv_bfloat16* row = x + (size_t)i * H;\n" // 7 pointer arithmetic: fine
          "    y[i + 1] = row[1];\n" // 8 copy: fine
          "    const float f = __bfloat162float(x[i]) * __bfloat162float(w[i]);\n" // 9 fp32: fine
          "    y[2] = __float2bfloat16(f + __bfloat162float(acc));\n"
          "}\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(has(rs, "static.lower-precision", 4)) << describe(rs);
    EXPECT_TRUE(has(rs, "static.lower-precision", 6)) << describe(rs);
    EXPECT_EQ(rs.size(), 2u) << describe(rs);
    kl::Problem allowed = bf16Problem();
    allowed.tags.push_back("allow-half-math");
    EXPECT_TRUE(checkSource(src, allowed).empty());
}

TEST(StaticRules, HalfAsAVariableNameIsNotAType)
{
    const std::string src = "__global__ void k(float* y, int H) {\n"
                            "    int half = H / 2;\n"
                            "    y[0] = half * 2 + half;\n"
                            "}\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(rs.empty()) << describe(rs);
}

TEST(StaticRules, Fp8AndTf32AreLowerPrecision)
{
    const std::string src = "#include <cuda_fp8.h>\n"
                            "#include <mma.h>\n"
                            "__global__ void k(float* y) {\n"
                            "    __nv_fp8_e4m3 q(y[0]);\n" // 4
                            "    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 8, "
                            "nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major> a;\n" // 5
                            "    y[0] = float(q);\n"
                            "}\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(has(rs, "static.lower-precision", 4)) << describe(rs);
    EXPECT_TRUE(has(rs, "static.lower-precision", 5)) << describe(rs);
}

TEST(StaticRules, ReasonsAreSortedByLineAndDeduplicated)
{
    const std::string src = "__device__ int a;\n"
                            "__global__ void k(long long* y) { y[0] = clock64() + clock64(); }\n";
    const auto rs = checkSource(src, bf16Problem());
    ASSERT_EQ(rs.size(), 2u) << describe(rs);
    EXPECT_EQ(rs[0].line, 1);
    EXPECT_EQ(rs[1].line, 2);
    EXPECT_EQ(rs[1].rule, "static.timer-read");
}

TEST(StaticRules, VerdictFromReasons)
{
    using kl::referee::verdictFor;
    EXPECT_EQ(verdictFor({}), kl::Verdict::Accepted);
    EXPECT_EQ(verdictFor({ { "static.shape-special-case", "m", 3, false } }), kl::Verdict::PendingReview);
    EXPECT_EQ(verdictFor({ { "static.shape-special-case", "m", 3, false }, { "static.timer-read", "m", 4, true } }),
        kl::Verdict::Rejected);
}

} // namespace

namespace {

TEST(StaticRules, MalformedSourcesNeverCrashOrHang)
{
    const std::vector<std::string> nasty
        = { "", "\"unterminated", "/* unterminated", "'", "#", "#include", "#include <", "#define", "#define F(",
              "#define A A\nA", "#define A B\n#define B A\nA B", "#define F(x) F(x)\nF(F(1))", "R\"delim(never closed",
              "__device__", "__device__ int", "if (", "if (T ==", "min(", "min(T,", "}}}}{{{", "__global__ void k(",
              "asm(\"%\");", std::string(1, '\0') + "x", "\\\n\\\n\\", "const_cast<", "(*)kX", "__attribute__(((((" };
    for (const auto& src : nasty)
        EXPECT_NO_THROW(checkSource(src, bf16Problem())) << src;
    // Pseudo-random token soup: deterministic, so a failure reproduces.
    const std::vector<std::string> pieces = { "__device__", "int", "x", "T", "==", "4096", "(", ")", "{", "}", ";",
        "if", "return", "#define M", "\n", "min", ",", "const", "*", "static", "asm(\"exit;\")", "\"s\"", "/*", "*/",
        "//", "[", "]", "=", "<<<", "##" };
    std::uint32_t state = 12345;
    for (int round = 0; round < 200; ++round) {
        std::string src;
        for (int i = 0; i < 200; ++i) {
            state = state * 1664525u + 1013904223u;
            src += pieces[(state >> 16) % pieces.size()] + " ";
        }
        EXPECT_NO_THROW(checkSource(src, bf16Problem()));
    }
}

TEST(StaticRules, MacroBombIsRejectedQuickly)
{
    std::string src = "#define B0 +1\n";
    for (int i = 1; i <= 14; ++i) {
        src += "#define B" + std::to_string(i);
        for (int k = 0; k < 8; ++k)
            src += " B" + std::to_string(i - 1);
        src += "\n";
    }
    src += "__global__ void k(int* y) { y[0] = 0 B14; }\n";
    const auto rs = checkSource(src, bf16Problem());
    EXPECT_TRUE(has(rs, "static.macro-expansion", 16)) << describe(rs);
    // A macro used many times but expanding to little is fine.
    EXPECT_TRUE(
        checkSource("#define ONE 1\n__global__ void k(int* y) { y[0] = ONE + ONE + ONE; }\n", bf16Problem()).empty());
}

} // namespace
