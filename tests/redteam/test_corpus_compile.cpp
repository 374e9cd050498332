// Every corpus case that should reach the GPU (dynamic cheats, honest candidates) compiles with the harness's
// own NVRTC path for sm_90a, so the GPU suite tests the referee, not typos. NVRTC needs no GPU: this runs in CI.
#include "core/kernel_spec.h"
#include "kernels/nvrtc_compiler.h"
#include "tests/redteam/corpus.h"

#include <gtest/gtest.h>

namespace {

using kl::redteam::CorpusCase;

std::vector<CorpusCase> compiledCases()
{
    std::vector<CorpusCase> out;
    for (auto& c : kl::redteam::loadCorpus())
        if (!c.cheat || c.stage == "dynamic")
            out.push_back(c);
    return out;
}

kl::NvrtcCompiler& compiler()
{
    static kl::NvrtcCompiler instance({}, 2); // memory cache only
    return instance;
}

class CorpusCompile : public ::testing::TestWithParam<CorpusCase> { };

TEST_P(CorpusCompile, CompilesForSm90a)
{
    const CorpusCase& c = GetParam();
    kl::CompileJob job;
    job.source = c.source();
    const kl::KernelSpec spec = kl::parseKernelSpec(job.source);
    job.params = spec.defaults();
    job.arch = "sm_90a";
    for (const auto& l : spec.launches)
        job.kernels.push_back(l.kernel);
    const auto module = compiler().compile(job);
    ASSERT_TRUE(module);
    EXPECT_TRUE(module->report.ok) << c.file << "\n" << module->report.log;
    for (const auto& k : job.kernels)
        EXPECT_TRUE(module->loweredNames.count(k)) << c.file << ": kernel " << k << " not found in the CUBIN";
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusCompile, ::testing::ValuesIn(compiledCases()),
    [](const ::testing::TestParamInfo<CorpusCase>& param) { return param.param.name(); });

} // namespace
