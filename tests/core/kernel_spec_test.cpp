#include "core/errors.h"
#include "core/kernel_spec.h"

#include <gtest/gtest.h>

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
