// Every corpus case that gets past the source rules (ptx and dynamic cheats, honest candidates) compiles with
// the harness's own NVRTC path for sm_90a, and the referee's PTX rules judge what it compiled to: ptx cheats
// are caught with their expected rule, dynamic cheats and honest candidates pass untouched (unless
// ptx_expect names the PTX rule that also catches them). NVRTC needs no GPU: this runs in CI.
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "kernels/nvrtc_compiler.h"
#include "kernels/referee/referee.h"
#include "kernels/triton/triton_compiler.h"
#include "tests/redteam/corpus.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <set>
#include <sstream>
#include <unistd.h>

namespace {

using kl::redteam::CorpusCase;

std::vector<CorpusCase> compiledCases()
{
    std::vector<CorpusCase> out;
    for (auto& c : kl::redteam::loadCorpus())
        if (!c.cheat || c.stage != "static")
            out.push_back(c);
    return out;
}

kl::NvrtcCompiler& compiler()
{
    static kl::NvrtcCompiler instance({}, 2); // memory cache only
    return instance;
}

std::string describe(const std::vector<kl::VerdictReason>& rs)
{
    std::string s;
    for (const auto& r : rs)
        s += "  " + r.rule + " line " + std::to_string(r.line) + (r.blocking ? " [blocking]: " : " [review]: ")
            + r.message + "\n";
    return s.empty() ? "  (no reasons)\n" : s;
}

// A Triton case compiles with Triton's own compiler, as the harness would (kernels/triton), for the problem's
// signature.
std::shared_ptr<const kl::CompiledModule> compileForSm90a(
    const std::string& source, const kl::Problem* problem = nullptr)
{
    kl::CompileJob job;
    job.source = source;
    const kl::KernelSpec spec = kl::parseKernelSpec(job.source);
    job.params = spec.defaults();
    job.arch = "sm_90a";
    for (const auto& l : spec.launches)
        if (std::find(job.kernels.begin(), job.kernels.end(), l.kernel) == job.kernels.end())
            job.kernels.push_back(l.kernel);
    if (spec.language == kl::KernelLanguage::Triton && problem)
        kl::prepareTritonJob(job, spec, *problem);
    return compiler().compile(job);
}

class CorpusCompile : public ::testing::TestWithParam<CorpusCase> { };

TEST_P(CorpusCompile, CompilesForSm90aAndMeetsThePtxRules)
{
    const CorpusCase& c = GetParam();
    const kl::Problem problem = kl::redteam::corpusProblem(c.problem);
    std::string noTriton;
    if (kl::detectLanguage(c.source()) == kl::KernelLanguage::Triton && kl::tritonVersion(&noTriton).empty())
        GTEST_SKIP() << noTriton;
    const auto module = compileForSm90a(c.source(), &problem);
    ASSERT_TRUE(module);
    // A ptx cheat may not even link (ptxas: unresolved device-runtime call); its PTX is judged all the same.
    if (c.stage != "ptx") {
        ASSERT_TRUE(module->report.ok) << c.file << "\n" << module->report.log;
        for (const auto& l : kl::parseKernelSpec(c.source()).launches)
            EXPECT_TRUE(module->loweredNames.count(l.kernel))
                << c.file << ": kernel " << l.kernel << " not in the CUBIN";
    }
    ASSERT_FALSE(module->ptx.empty()) << c.file << "\n" << module->report.log;

    const auto reasons = kl::referee::checkPtx(module->ptx, problem, kl::parseKernelSpec(c.source()));
    const std::vector<std::string>& expected = c.stage == "ptx" ? c.expect : c.ptxExpect;
    if (c.cheat && !expected.empty()) {
        const auto hit = std::find_if(reasons.begin(), reasons.end(), [&](const kl::VerdictReason& r) {
            return std::find(expected.begin(), expected.end(), r.rule) != expected.end();
        });
        ASSERT_NE(hit, reasons.end()) << c.file << " (" << c.note << ") expected " << expected.front() << ", got:\n"
                                      << describe(reasons);
        EXPECT_TRUE(hit->blocking) << describe(reasons);
        EXPECT_EQ(kl::referee::verdictFor(reasons), kl::Verdict::Rejected);
        if (c.stage == "ptx") {
            // A ptx-stage cheat is hidden from the source rules unless it says which also catch it.
            const auto src = kl::referee::checkSource(c.source(), kl::redteam::corpusProblem(c.problem));
            if (c.staticExpect.empty()) {
                EXPECT_TRUE(src.empty()) << c.file << ": the source rules catch it too; name them in static_expect:\n"
                                         << describe(src);
            }
        }
    } else {
        EXPECT_TRUE(reasons.empty()) << c.file << " must pass the PTX rules untouched ("
                                     << (c.cheat ? "a dynamic case must reach the GPU" : "honest") << "), got:\n"
                                     << describe(reasons);
    }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusCompile, ::testing::ValuesIn(compiledCases()),
    [](const ::testing::TestParamInfo<CorpusCase>& param) { return param.param.name(); });

// The baseline and every CUDA template a session may start from: the portable one, the per-architecture ones
// (arch_templates) and the template*.cu files not yet named there.
std::set<std::string> shippedCandidateFiles(const std::filesystem::path& dir, const kl::Problem& problem)
{
    std::set<std::string> files { problem.baselineFile, problem.templateFile };
    for (const auto& [arch, file] : problem.archTemplates)
        files.insert(file);
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("template", 0) == 0 && entry.path().extension() == ".cu")
            files.insert(name);
    }
    return files;
}

// The shipped baselines and templates compile to PTX the referee accepts.
TEST(ShippedCandidates, PassThePtxRules)
{
    const std::filesystem::path problems = std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems";
    int checked = 0;
    for (const auto& dir : std::filesystem::directory_iterator(problems)) {
        if (!std::filesystem::exists(dir.path() / "problem.json"))
            continue;
        const kl::Problem problem = kl::loadProblem(dir.path().string());
        for (const std::string& file : shippedCandidateFiles(dir.path(), problem)) {
            std::ifstream in(dir.path() / file);
            if (!in)
                continue;
            std::stringstream ss;
            ss << in.rdbuf();
            const auto module = compileForSm90a(ss.str());
            ASSERT_TRUE(module->report.ok) << (dir.path() / file).string() << "\n" << module->report.log;
            const auto reasons = kl::referee::checkPtx(module->ptx, problem, kl::parseKernelSpec(ss.str()));
            EXPECT_TRUE(reasons.empty()) << (dir.path() / file).string() << ":\n" << describe(reasons);
            ++checked;
        }
    }
    EXPECT_GE(checked, 6);
}

// What ships is what was measured: the harness passes no define of its own, only the candidate's parameters.
TEST(HarnessCompile, NoDefineTellsTheCandidateItIsMeasured)
{
    kl::CompileJob job;
    job.source = "__global__ void k() {}";
    job.params = { { "BLOCK", 256 } };
    job.arch = "sm_90a";
    std::vector<std::string> defines;
    for (const auto& o : compiler().options(job))
        if (o.rfind("-D", 0) == 0 || o.rfind("--define-macro", 0) == 0)
            defines.push_back(o);
    EXPECT_EQ(defines, std::vector<std::string> { "-DBLOCK=256" });
    const auto module = compileForSm90a("#ifdef KL_HARNESS\n#error measured\n#endif\n"
                                        "// @kl:launch k grid=(1) block=(32) args=()\n"
                                        "extern \"C\" __global__ void k() {}\n");
    EXPECT_TRUE(module->report.ok) << module->report.log;
}

// The PTX is kept with the CUBIN in the disk cache; a cached entry without it is recompiled, never trusted.
TEST(HarnessCompile, PtxIsCachedWithTheCubin)
{
    const auto dir = std::filesystem::temp_directory_path() / ("kl-ptx-cache-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    kl::CompileJob job;
    job.source = "extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = 1.f; }\n";
    job.arch = "sm_90a";
    job.kernels = { "k" };
    std::string ptx;
    {
        kl::NvrtcCompiler first(dir, 1);
        const auto m = first.compile(job);
        ASSERT_TRUE(m->report.ok) << m->report.log;
        ptx = m->ptx;
        ASSERT_NE(ptx.find(".entry k"), std::string::npos);
        ASSERT_TRUE(std::filesystem::exists(dir / (m->key + ".ptx")));
    }
    {
        kl::NvrtcCompiler second(dir, 1);
        const auto m = second.compile(job);
        EXPECT_TRUE(m->report.cacheHit);
        EXPECT_EQ(m->ptx, ptx);
        std::filesystem::remove(dir / (m->key + ".ptx"));
    }
    {
        kl::NvrtcCompiler third(dir, 1);
        const auto m = third.compile(job);
        EXPECT_FALSE(m->report.cacheHit);
        EXPECT_EQ(m->ptx, ptx);
        EXPECT_EQ(third.compiles(), 1u);
    }
    std::filesystem::remove_all(dir);
}

} // namespace
