#include "tests/kernels/tensor_core_compile_check.h"

#include "kernels/nvrtc_compiler.h"
#include "kernels/referee/referee.h"

#include <filesystem>
#include <future>
#include <gtest/gtest.h>
#include <random>

namespace kl::test {

void expectTensorCoreModulesWithoutSpills(
    const std::string& source, const KernelSpec& spec, const Problem& problem, const std::vector<ParamValues>& points)
{
    NvrtcCompiler compiler(
        std::filesystem::temp_directory_path() / ("kl-test-cache-tc-" + std::to_string(std::random_device {}())), 2);
    std::vector<std::pair<std::string, std::future<std::shared_ptr<const CompiledModule>>>> modules;
    for (const char* arch : { "sm_80", "sm_90a" })
        for (std::size_t i = 0; i < points.size(); ++i) {
            ParamValues full = spec.defaults();
            for (const auto& [k, v] : points[i])
                full[k] = v;
            spec.requireValidParams(full);
            CompileJob job;
            job.source = source;
            job.params = full;
            job.arch = arch;
            for (const auto& l : spec.launches)
                job.kernels.push_back(l.kernel);
            modules.emplace_back(std::string(arch) + " point " + std::to_string(i), compiler.submit(job));
        }
    for (auto& [where, future] : modules) {
        const auto m = future.get();
        ASSERT_TRUE(m->report.ok) << where << ":\n" << m->report.log;
        for (const char* instruction : { "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                 "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global" })
            EXPECT_NE(m->ptx.find(instruction), std::string::npos) << where << " lacks " << instruction;
        ASSERT_EQ(m->report.kernels.size(), 2u) << where;
        for (const auto& k : m->report.kernels) {
            EXPECT_EQ(k.spillStores, 0) << where << " " << k.kernel << "\n" << m->report.log;
            EXPECT_EQ(k.localBytes, 0) << where << " " << k.kernel;
        }
        for (const auto& r : referee::checkPtx(m->ptx, problem))
            ADD_FAILURE() << where << ": " << r.rule << " line " << r.line << ": " << r.message;
    }
}

} // namespace kl::test
