#include "tests/kernels/tensor_core_compile_check.h"

#include "core/json_io.h"
#include "core/loop_device_limits.h"
#include "kernels/referee/referee.h"
#include "kernels/shape_sampler.h"
#include "tests/support/text_file.h"

#include <algorithm>
#include <filesystem>
#include <future>
#include <gtest/gtest.h>
#include <random>

namespace kl::test {

void CandidateFile::load(const std::filesystem::path& problemFolder, const std::filesystem::path& sourceFile)
{
    problem = loadProblem(problemFolder.string());
    source = readTextFile(sourceFile);
    spec = parseKernelSpec(source, problem);
}

std::string violation(const std::optional<VerdictReason>& why)
{
    return why ? why->rule + ": " + why->message : "";
}

DeviceInfo deviceModel(int major, int minor, std::int64_t sharedOptinKiB, int maxThreadsPerSm)
{
    DeviceInfo d;
    d.name = "model sm_" + std::to_string(major * 10 + minor);
    d.ccMajor = major;
    d.ccMinor = minor;
    d.arch = "sm_" + std::to_string(major * 10 + minor);
    d.sharedPerBlock = 48 * 1024;
    d.sharedPerBlockOptin = sharedOptinKiB * 1024;
    d.regsPerBlock = 65536;
    d.regsPerSm = 65536;
    d.maxThreadsPerBlock = 1024;
    d.maxThreadsPerSm = maxThreadsPerSm;
    d.warpSize = 32;
    return d;
}

std::vector<Shape> harnessShapes(const Problem& p)
{
    std::vector<Shape> shapes = shapesOf(p);
    for (const auto& s : heldOutShapes(p, 40, 13))
        shapes.push_back(p.withConstants(s));
    return shapes;
}

std::vector<std::pair<std::string, std::shared_ptr<const CompiledModule>>> compilePoints(const std::string& source,
    const KernelSpec& spec, const std::vector<ParamValues>& points, const std::vector<std::string>& archs)
{
    NvrtcCompiler compiler(
        std::filesystem::temp_directory_path() / ("kl-test-cache-tc-" + std::to_string(std::random_device {}())), 2);
    std::vector<std::pair<std::string, std::future<std::shared_ptr<const CompiledModule>>>> futures;
    for (const auto& arch : archs)
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
            futures.emplace_back(arch + " point " + std::to_string(i), compiler.submit(job));
        }
    std::vector<std::pair<std::string, std::shared_ptr<const CompiledModule>>> modules;
    for (auto& [where, future] : futures)
        modules.emplace_back(where, future.get());
    return modules;
}

void expectModulesWithoutSpills(
    const std::vector<std::pair<std::string, std::shared_ptr<const CompiledModule>>>& modules, const KernelSpec& spec,
    const Problem& problem)
{
    for (const auto& [where, m] : modules) {
        ASSERT_TRUE(m->report.ok) << where << ":\n" << m->report.log;
        ASSERT_EQ(m->report.kernels.size(), spec.launches.size()) << where;
        for (const auto& k : m->report.kernels) {
            EXPECT_EQ(k.spillStores, 0) << where << " " << k.kernel << "\n" << m->report.log;
            EXPECT_EQ(k.localBytes, 0) << where << " " << k.kernel;
        }
        for (const auto& r : referee::checkPtx(m->ptx, problem))
            ADD_FAILURE() << where << ": " << r.rule << " line " << r.line << ": " << r.message;
    }
}

void expectTensorCoreModulesWithoutSpills(
    const std::string& source, const KernelSpec& spec, const Problem& problem, const std::vector<ParamValues>& points)
{
    ASSERT_EQ(spec.launches.size(), 2u);
    const auto modules = compilePoints(source, spec, points, { "sm_80", "sm_90a" });
    expectModulesWithoutSpills(modules, spec, problem);
    for (const auto& [where, m] : modules)
        for (const char* instruction : { "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                 "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global" })
            EXPECT_NE(m->ptx.find(instruction), std::string::npos) << where << " lacks " << instruction;
}

void expectMlaSplitGridFitsTheWorkspace(
    const Problem& problem, const KernelSpec& spec, const std::function<std::int64_t(const ParamValues&)>& tileOf)
{
    ASSERT_EQ(spec.launches.size(), 2u);
    ASSERT_EQ(spec.workspaces.size(), 1u);
    const auto shapes = harnessShapes(problem);
    int multiSplit = 0;
    for (const auto& point : spec.enumerateSpace())
        for (const auto& shape : shapes)
            for (const std::int64_t sms : { 1, 108, 132, 148, 4096 }) {
                Bindings b = bindingsFor(point, shape.bindings());
                const std::int64_t B = b.at("B"), SQ = b.at("SQ"), rows = B * SQ * 128;
                const std::int64_t listed = problem.name == "mla_decode"
                    ? b.at("MAXP") * 64
                    : std::min<std::int64_t>(2048, b.at("MAXP") * 64);
                const std::int64_t workspace = spec.workspaces[0].bytes.evaluateInt(b);
                b[kSmCountIdentifier] = sms;
                const std::string where = shape.label() + " SM_COUNT=" + std::to_string(sms);
                EXPECT_EQ(spec.launches[0].grid[0].evaluateInt(b), B * SQ * 2) << where;
                const std::int64_t splits = spec.launches[0].grid[1].evaluateInt(b), tile = tileOf(point);
                ASSERT_GE(splits, 1) << where;
                ASSERT_LE(splits, std::min<std::int64_t>(64, (listed + tile - 1) / tile)) << where;
                ASSERT_GE(workspace, 16 + rows * splits * (512 + 2) * 4) << where;
                EXPECT_EQ(spec.launches[1].grid[0].evaluateInt(b), splits > 1 ? rows : 0) << where;
                multiSplit += splits > 1;
                if (B * SQ * 2 > point.at("WAVES") * std::min<std::int64_t>(sms, 256)) {
                    EXPECT_EQ(splits, 1) << where;
                }
            }
    EXPECT_GT(multiSplit, 0);
}

} // namespace kl::test
