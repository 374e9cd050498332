// NVRTC -> CUBIN without a GPU: every shipped problem's sources compile for sm_90a, resources are parsed,
// the content-addressed cache returns hits, and errors come back as a log rather than an exception.
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "kernels/nvrtc_compiler.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <sstream>

namespace {

std::filesystem::path problemsDir()
{
    return std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems";
}

std::filesystem::path freshCacheDir(const std::string& name)
{
    return kl::test::freshDir("test-cache-" + name);
}

kl::CompileJob jobFor(const std::string& source, const kl::ParamValues& params)
{
    kl::CompileJob job;
    job.source = source;
    job.params = params;
    job.arch = "sm_90a";
    for (const auto& l : kl::parseKernelSpec(source).launches)
        job.kernels.push_back(l.kernel);
    return job;
}

} // namespace

TEST(NvrtcCompile, ArchFromComputeCapability)
{
    EXPECT_EQ(kl::archForComputeCapability(9, 0), "sm_90a");
    EXPECT_EQ(kl::archForComputeCapability(8, 9), "sm_89");
    EXPECT_EQ(kl::archForComputeCapability(10, 0), "sm_100a");
    EXPECT_EQ(kl::archForComputeCapability(12, 0), "sm_120");
}

TEST(NvrtcCompile, PtxasInfoIsParsedPerKernel)
{
    const std::string log = "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'\n"
                            "ptxas info    : Function properties for _Z1kPf\n"
                            "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
                            "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem\n"
                            "ptxas info    : Compiling entry function 'other' for 'sm_90a'\n"
                            "ptxas info    : Used 8 registers, used 0 barriers\n";
    const auto ks = kl::parsePtxasInfo(log);
    ASSERT_EQ(ks.size(), 2u);
    EXPECT_EQ(ks[0].kernel, "_Z1kPf");
    EXPECT_EQ(ks[0].registers, 40);
    EXPECT_EQ(ks[0].spillStores, 8);
    EXPECT_EQ(ks[0].spillLoads, 12);
    EXPECT_EQ(ks[0].localBytes, 16);
    EXPECT_EQ(ks[0].staticSharedBytes, 2048);
    EXPECT_EQ(ks[1].kernel, "other");
    EXPECT_EQ(ks[1].registers, 8);
}

TEST(NvrtcCompile, EveryProblemSourceCompilesToCubin)
{
    kl::NvrtcCompiler compiler(freshCacheDir("problems"), 2);
    std::vector<std::future<std::shared_ptr<const kl::CompiledModule>>> futures;
    std::vector<std::string> names;
    int problems = 0;
    for (const auto& entry : std::filesystem::directory_iterator(problemsDir())) {
        if (!std::filesystem::exists(entry.path() / "problem.json"))
            continue;
        const kl::Problem p = kl::loadProblem(entry.path().string());
        ++problems;
        for (const auto& file : { p.referenceFile, p.baselineFile, p.templateFile }) {
            const std::string src = kl::test::readTextFile(entry.path() / file);
            const auto spec = kl::parseKernelSpec(src);
            futures.push_back(compiler.submit(jobFor(src, spec.defaults())));
            names.push_back(p.name + "/" + file);
        }
    }
    EXPECT_EQ(problems, 12);
    for (std::size_t i = 0; i < futures.size(); ++i) {
        const auto m = futures[i].get();
        EXPECT_TRUE(m->report.ok) << names[i] << ":\n" << m->report.log;
        EXPECT_GT(m->cubin.size(), 1000u) << names[i];
        // A CUBIN is an ELF image: loading it needs no PTX JIT.
        EXPECT_EQ(m->cubin.substr(0, 4),
            std::string("\x7f"
                        "ELF"))
            << names[i];
        ASSERT_FALSE(m->report.kernels.empty()) << names[i];
        for (const auto& k : m->report.kernels) {
            EXPECT_GT(k.registers, 0) << names[i];
            EXPECT_EQ(k.spillStores, 0) << names[i] << " spills in its default configuration";
        }
        EXPECT_FALSE(m->loweredNames.empty()) << names[i];
    }
}

TEST(NvrtcCompile, TemplateSpacesAreLargeAndSampledConfigsCompile)
{
    const auto dir = problemsDir() / "rmsnorm";
    const std::string src = kl::test::readTextFile(dir / "template.cu");
    const auto spec = kl::parseKernelSpec(src);
    const auto space = spec.enumerateSpace();
    EXPECT_GE(space.size(), 500u) << "the search-efficiency benchmark needs a space of at least 500 configurations";

    kl::NvrtcCompiler compiler(freshCacheDir("space"), 2);
    std::mt19937 rng(7);
    std::vector<std::future<std::shared_ptr<const kl::CompiledModule>>> fs;
    for (int i = 0; i < 6; ++i)
        fs.push_back(compiler.submit(jobFor(src, space[rng() % space.size()])));
    for (auto& f : fs) {
        const auto m = f.get();
        EXPECT_TRUE(m->report.ok) << m->report.log;
    }
}

TEST(NvrtcCompile, CacheHitsInMemoryAndOnDisk)
{
    const auto dir = freshCacheDir("hits");
    const std::string src = "// @kl:param B = 64 in [64, 128]\n"
                            "// @kl:launch k grid=(1) block=(B) args=(y)\n"
                            "extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = B; }\n";
    std::string key;
    {
        kl::NvrtcCompiler compiler(dir, 1);
        const auto first = compiler.compile(jobFor(src, { { "B", 64 } }));
        ASSERT_TRUE(first->report.ok) << first->report.log;
        EXPECT_FALSE(first->report.cacheHit);
        const auto second = compiler.compile(jobFor(src, { { "B", 64 } }));
        EXPECT_TRUE(second->report.cacheHit);
        EXPECT_EQ(second->cubin, first->cubin);
        // Different defines are a different content address.
        const auto other = compiler.compile(jobFor(src, { { "B", 128 } }));
        EXPECT_FALSE(other->report.cacheHit);
        EXPECT_NE(other->key, first->key);
        EXPECT_EQ(compiler.compiles(), 2u);
        key = first->key;
    }
    EXPECT_TRUE(std::filesystem::exists(dir / (key + ".cubin")));
    kl::NvrtcCompiler fresh(dir, 1);
    const auto fromDisk = fresh.compile(jobFor(src, { { "B", 64 } }));
    EXPECT_TRUE(fromDisk->report.cacheHit);
    EXPECT_TRUE(fromDisk->report.ok);
    EXPECT_EQ(fresh.compiles(), 0u);
    // A damaged entry is recompiled, not trusted.
    std::ofstream(dir / (key + ".json")) << "{ not json";
    kl::NvrtcCompiler again(dir, 1);
    const auto rebuilt = again.compile(jobFor(src, { { "B", 64 } }));
    EXPECT_TRUE(rebuilt->report.ok);
    EXPECT_EQ(again.compiles(), 1u);
    std::filesystem::remove_all(dir);
}

TEST(NvrtcCompile, ErrorsComeBackAsLogWithLine)
{
    kl::NvrtcCompiler compiler(freshCacheDir("errors"), 1);
    const std::string src = "// @kl:launch k grid=(1) block=(32) args=(y)\n"
                            "extern \"C\" __global__ void k(float* y) {\n"
                            "  y[threadIdx.x] = undefined_name;\n"
                            "}\n";
    const auto m = compiler.compile(jobFor(src, {}));
    EXPECT_FALSE(m->report.ok);
    EXPECT_NE(m->report.log.find("undefined_name"), std::string::npos) << m->report.log;
    EXPECT_NE(m->report.log.find("(3)"), std::string::npos) << "the log names the line: " << m->report.log;
    EXPECT_TRUE(m->cubin.empty());
}

TEST(NvrtcCompile, LaunchPlanNamingAMissingKernelFails)
{
    kl::NvrtcCompiler compiler(freshCacheDir("missing"), 1);
    const std::string src = "// @kl:launch not_here grid=(1) block=(32) args=(y)\n"
                            "extern \"C\" __global__ void k(float* y) { y[0] = 1; }\n";
    const auto m = compiler.compile(jobFor(src, {}));
    EXPECT_FALSE(m->report.ok);
}

TEST(NvrtcCompile, ParallelCompilesOfTheSameKeyCompileOnce)
{
    kl::NvrtcCompiler compiler(freshCacheDir("dedupe"), 4);
    const std::string src = "// @kl:launch k grid=(1) block=(32) args=(y)\n"
                            "extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = 2; }\n";
    std::vector<std::future<std::shared_ptr<const kl::CompiledModule>>> fs;
    for (int i = 0; i < 8; ++i)
        fs.push_back(compiler.submit(jobFor(src, {})));
    for (auto& f : fs)
        EXPECT_TRUE(f.get()->report.ok);
    EXPECT_EQ(compiler.compiles(), 1u);
    EXPECT_EQ(compiler.cacheHits(), 7u);
}

#include "kernels/referee/referee.h"

TEST(ShippedSources, PassTheRefereesStaticRules)
{
    // The templates are what agents start from: they must not trip a blocking static rule themselves.
    for (const auto& entry : std::filesystem::directory_iterator(problemsDir())) {
        if (!std::filesystem::exists(entry.path() / "problem.json"))
            continue;
        const kl::Problem p = kl::loadProblem(entry.path().string());
        for (const auto& file : { p.baselineFile, p.templateFile }) {
            for (const auto& r : kl::referee::checkSource(kl::test::readTextFile(entry.path() / file), p))
                EXPECT_FALSE(r.blocking) << p.name << "/" << file << ": " << r.rule << " line " << r.line << ": "
                                         << r.message;
        }
    }
}

#include "kernels/harness_kernel_source.h"

// The worker builds every reference twice: -DKL_ACC=double judges, the default fp32 build calibrates tolerances.
// The two must differ (the macro is really used) and both compile without spills.
TEST(NvrtcCompile, EveryReferenceCompilesWithFp32AndFp64Accumulation)
{
    kl::NvrtcCompiler compiler(freshCacheDir("references"), 2);
    int problems = 0;
    for (const auto& entry : std::filesystem::directory_iterator(problemsDir())) {
        if (!std::filesystem::exists(entry.path() / "problem.json"))
            continue;
        const kl::Problem p = kl::loadProblem(entry.path().string());
        ++problems;
        const std::string src = kl::test::readTextFile(entry.path() / p.referenceFile);
        EXPECT_NE(src.find("KL_ACC"), std::string::npos) << p.name << "/reference.cu has no accumulator macro";
        kl::CompileJob fp32 = jobFor(src, kl::parseKernelSpec(src).defaults());
        kl::CompileJob fp64 = fp32;
        fp64.extraFlags = { "-DKL_ACC=double" };
        const auto a = compiler.compile(fp32);
        const auto b = compiler.compile(fp64);
        ASSERT_TRUE(a->report.ok) << p.name << ":\n" << a->report.log;
        ASSERT_TRUE(b->report.ok) << p.name << " (KL_ACC=double):\n" << b->report.log;
        // A selection (dsa_topk's indices) accumulates nothing: its exact integer output has no rounding to measure.
        const bool integerOutputsOnly = std::all_of(p.tensors.begin(), p.tensors.end(), [](const kl::TensorSpec& t) {
            return t.role != kl::TensorRole::Output || t.dtype == kl::DType::I32 || t.dtype == kl::DType::I64;
        });
        if (!integerOutputsOnly) {
            EXPECT_NE(a->cubin, b->cubin) << p.name << ": KL_ACC changes nothing";
        }
    }
    EXPECT_EQ(problems, 12);
}

TEST(NvrtcCompile, HarnessHelperKernelsCompile)
{
    kl::NvrtcCompiler compiler(freshCacheDir("harness"), 1);
    kl::CompileJob job;
    job.source = kl::harnessKernelSource();
    job.arch = "sm_90a";
    job.kernels = kl::harnessKernelNames(); // the list the worker loads
    const auto m = compiler.compile(job);
    EXPECT_TRUE(m->report.ok) << m->report.log;
    EXPECT_EQ(m->loweredNames.size(), job.kernels.size());
}

// The test problem with meaning-carrying integer inputs, a constant dim and a computed scalar: its sources name
// the constant and the scalar as arguments, and compile (the GPU suite runs it: tests/kernels/test_worker_gpu.cpp).
TEST(NvrtcCompile, TheFormatTestProblemLoadsAndCompiles)
{
    const auto dir = std::filesystem::path(KL_SOURCE_DIR) / "tests" / "kernels" / "problems" / "paged_gather";
    const kl::Problem p = kl::loadProblem(dir.string());
    ASSERT_TRUE(p.dim("D") && p.dim("D")->constant);
    kl::NvrtcCompiler compiler(freshCacheDir("format"), 2);
    for (const auto& file : { p.referenceFile, p.baselineFile, p.templateFile }) {
        const std::string src = kl::test::readTextFile(dir / file);
        const auto spec = kl::parseKernelSpec(src, p);
        ASSERT_EQ(spec.launches.size(), 1u) << file;
        const auto& args = spec.launches[0].args;
        EXPECT_NE(std::find(args.begin(), args.end(), "D"), args.end()) << file;
        EXPECT_NE(std::find(args.begin(), args.end(), "scale"), args.end()) << file;
        const auto m = compiler.compile(jobFor(src, spec.defaults()));
        EXPECT_TRUE(m->report.ok) << file << ":\n" << m->report.log;
    }
}
