// The generated bundles compile: the rmsnorm bundle through its own CMake project (library, CPU dispatch
// test and GPU self-test, then ctest: the dispatch test runs, the self-test skips without a GPU), the
// cuBLAS-fallback gemm bundle through nvcc -c of each .cu.
#include "core/catalogue.h"
#include "export_fixture.h"
#include "kernels/export/exporter.h"
#include "kernels/export/pipeline_export.h"
#include "kernels/export/regime_export.h"
#include "tests/support/text_file.h"

#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

namespace kl {
namespace {

    namespace fs = std::filesystem;
    using namespace kl::exporter;
    using namespace kl::test;

    int runCommand(const std::string& cmd, std::string* output)
    {
        const fs::path log = kl::test::freshDir("log");
        const int rc = std::system((cmd + " > " + log.string() + " 2>&1").c_str());
        std::ifstream in(log);
        std::stringstream ss;
        ss << in.rdbuf();
        *output = ss.str();
        fs::remove(log);
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    }

    fs::path exportFixture(const std::string& fixture, const std::vector<ShapeOutcome>& outcomes, BuiltSession& b)
    {
        b = buildSession(fixture, outcomes);
        const fs::path out = kl::test::freshDir("build-" + fixture);
        ExportOptions o;
        o.outDir = out;
        exportBundle(SessionStore::load(b.dir), b.problem, o);
        return out;
    }

    // Configures, builds and runs ctest on an exported CMake project in out/build; *log is the last step's output.
    ::testing::AssertionResult cmakeBuildAndCtest(const fs::path& out, std::string* log)
    {
        const fs::path build = out / "build";
        const std::string gen = std::system("command -v ninja > /dev/null 2>&1") == 0 ? " -G Ninja" : "";
        if (runCommand(std::string(KL_CMAKE) + " -S " + out.string() + " -B " + build.string() + gen
                    + " -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=" + KL_NVCC,
                log)
            != 0)
            return ::testing::AssertionFailure() << "configure failed:\n" << *log;
        if (runCommand(std::string(KL_CMAKE) + " --build " + build.string() + " -j2", log) != 0)
            return ::testing::AssertionFailure() << "build failed:\n" << *log;
        if (runCommand("cd " + build.string() + " && ctest --output-on-failure", log) != 0)
            return ::testing::AssertionFailure() << "ctest failed:\n" << *log;
        return ::testing::AssertionSuccess();
    }

    TEST(ExportBuild, RmsnormBundleBuildsWithItsOwnCMakeProjectAndPassesCtestOnTheCpu)
    {
        if (!fs::exists(KL_NVCC))
            GTEST_SKIP() << "nvcc not found";
        BuiltSession b;
        const fs::path out = exportFixture("rmsnorm_fx", rmsnormOutcomes(), b);
        const fs::path build = out / "build";
        std::string log;
        ASSERT_TRUE(cmakeBuildAndCtest(out, &log));
        EXPECT_NE(log.find("dispatch"), std::string::npos);
        EXPECT_TRUE(fs::exists(build / "libkl_rmsnorm_fx.a"));
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

    TEST(ExportBuild, GemmBundleWithCublasFallbackCompilesWithNvcc)
    {
        if (!fs::exists(KL_NVCC))
            GTEST_SKIP() << "nvcc not found";
        std::vector<ShapeOutcome> outcomes;
        for (std::int64_t m : { 1, 16, 128, 1024, 16384 })
            outcomes.push_back({ { { "M", m }, { "N", 4096 }, { "K", 4096 } }, true, m <= 16 ? 1.3 : 0.6 });
        outcomes.push_back({ { { "M", 8 }, { "N", 256 }, { "K", 256 } }, true, 1.2, 0.02, true });
        outcomes.push_back({ { { "M", 4 }, { "N", 16384 }, { "K", 16384 } }, true, 1.1, 0.02, true });
        BuiltSession b;
        const fs::path out = exportFixture("gemm_fx", outcomes, b);
        const std::string inc = " -I" + (out / "include").string() + " -I" + (out / "src").string();
        std::string log;
        EXPECT_TRUE(fs::exists(out / "src/kl_gemm_fx_fallback.cu"));
        EXPECT_FALSE(fs::exists(out / "src/kl_gemm_fx_fallback.cuh"));
        for (const char* f : { "src/kl_gemm_fx_candidate.cu", "src/kl_gemm_fx_fallback.cu", "src/kl_gemm_fx_run.cu",
                 "test/selftest.cu" })
            EXPECT_EQ(runCommand(std::string(KL_NVCC) + " -std=c++17 -arch=sm_90 -Werror all-warnings -c" + inc + " -o "
                              + (out / "obj.o").string() + " " + (out / f).string(),
                          &log),
                0)
                << f << "\n"
                << log;
        EXPECT_EQ(runCommand("cc -std=c99 -Wall -Werror -c" + inc + " -o " + (out / "d.o").string() + " "
                          + (out / "src/kl_gemm_fx_dispatch.c").string(),
                      &log),
            0)
            << log;
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

    TEST(ExportBuild, ClusterAndPdlLaunchesCompileWithNvcc)
    {
        if (!fs::exists(KL_NVCC))
            GTEST_SKIP() << "nvcc not found";
        // The rmsnorm fixture with its second kernel in clusters of two along the rows and launched with PDL.
        std::string source = kl::test::readTextFile(fixtureDir("rmsnorm_fx") / "candidate.cu");
        const std::string apply = "grid=(ceil_div(H, BLOCK*VEC), T) block=(BLOCK) smem=0 args=(y,";
        const auto at = source.find(apply);
        ASSERT_NE(at, std::string::npos);
        source.insert(at + apply.find(" args="), " cluster=(1, 2, 1) pdl=1");
        const fs::path candidate = kl::test::freshDir("cluster-src") / "candidate.cu";
        fs::create_directories(candidate.parent_path());
        std::ofstream(candidate) << source;
        const BuiltSession b = buildSessionFrom(fixtureDir("rmsnorm_fx"), candidate, rmsnormOutcomes());
        const fs::path out = kl::test::freshDir("cluster");
        ExportOptions o;
        o.outDir = out;
        exportBundle(SessionStore::load(b.dir), b.problem, o);
        const std::string launcher = kl::test::readTextFile(out / "src/kl_rmsnorm_fx_candidate.cu");
        EXPECT_NE(launcher.find("cudaLaunchAttributeClusterDimension"), std::string::npos);
        EXPECT_NE(launcher.find("cudaLaunchAttributeProgrammaticStreamSerialization"), std::string::npos);
        const std::string inc = " -I" + (out / "include").string() + " -I" + (out / "src").string();
        std::string log;
        EXPECT_EQ(runCommand("cd " + out.string() + " && " + KL_NVCC
                          + " -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror all-warnings -c" + inc
                          + " src/kl_rmsnorm_fx_candidate.cu src/kl_rmsnorm_fx_run.cu",
                      &log),
            0)
            << log;
        fs::remove_all(out);
        fs::remove_all(candidate.parent_path());
        fs::remove_all(b.dir);
    }

} // namespace
} // namespace kl

namespace kl {
namespace {

    // The regime dispatcher (issue 20) through its own CMake project: both regime bundles and the top-level library
    // build with nvcc, and ctest runs its regime-dispatch test and each bundle's dispatch test (self-tests skip).
    TEST(ExportBuild, RegimeDispatcherBuildsWithItsCMakeProjectAndPassesCtestOnTheCpu)
    {
        if (!fs::exists(KL_NVCC))
            GTEST_SKIP() << "nvcc not found";
        RegimeSession r;
        buildRegimeSession(r);
        const fs::path out = kl::test::freshDir("build-regimes");
        ExportOptions o;
        o.outDir = out;
        exportRegimes(SessionStore::load(r.built.dir), r.problem, o);
        const fs::path build = out / "build";
        std::string log;
        ASSERT_TRUE(cmakeBuildAndCtest(out, &log));
        EXPECT_NE(log.find("regimes_dispatch"), std::string::npos) << log;
        EXPECT_TRUE(fs::exists(build / "libkl_rmsnorm_fx_regimes.a"));
        EXPECT_TRUE(fs::exists(build / "decode" / "libkl_rmsnorm_fx_decode.a"));
        fs::remove_all(out);
    }

    // A pipeline bundle (llama_mlp_decode: rmsnorm and silu_and_mul candidates, both GEMMs on cuBLAS) through its own
    // CMake project: every stage's part and the entry point build with nvcc, ctest runs the candidate stages'
    // dispatch tests (their self-tests and the pipeline's skip without a GPU). The entry point and the pipeline's
    // self-test of dsa_decode (all stages on fallbacks, integer intermediates) compile with warnings as errors.
    TEST(ExportBuild, PipelineBundleBuildsWithItsCMakeProjectAndPassesCtestOnTheCpu)
    {
        if (!fs::exists(KL_NVCC))
            GTEST_SKIP() << "nvcc not found";
        const fs::path problems = fs::path(KL_SOURCE_DIR) / "kernels/problems";
        std::vector<BuiltSession> sessions;
        std::vector<PipelineStageSource> stages;
        for (const auto& [stage, problem] : { std::pair { "norm", "rmsnorm" }, std::pair { "act", "silu_and_mul" } }) {
            const Problem p = loadProblem((problems / problem).string());
            sessions.push_back(
                buildSessionFrom(problems / problem, problems / problem / p.templateFile, syntheticOutcomes(p)));
            stages.push_back(parseStageSource(std::string(stage) + "=" + sessions.back().dir.string()));
        }
        const fs::path out = kl::test::freshDir("build-pipeline");
        ExportOptions o;
        o.outDir = out;
        exportPipeline(loadPipeline(findPipelineFolder("llama_mlp_decode")), stages, o);
        std::string log;
        ASSERT_TRUE(cmakeBuildAndCtest(out, &log));
        EXPECT_NE(log.find("pipeline_selftest"), std::string::npos) << log;
        EXPECT_TRUE(fs::exists(out / "build" / "libkl_llama_mlp_decode.a"));
        EXPECT_TRUE(fs::exists(out / "build" / "gate_up" / "libkl_llama_mlp_decode_gate_up.a"));

        const fs::path dsa = kl::test::freshDir("build-pipeline-dsa");
        o.outDir = dsa;
        exportPipeline(loadPipeline(findPipelineFolder("dsa_decode")), {}, o);
        std::string inc = " -I" + (dsa / "include").string() + " -I" + (dsa / "src").string();
        for (const char* st : { "indexer", "topk", "attn" })
            inc += " -I" + (dsa / st / "include").string();
        for (const fs::path& dir : { out, dsa }) {
            const std::string P = dir == out ? "kl_llama_mlp_decode" : "kl_dsa_decode";
            std::string flags = dir == out ? " -I" + (out / "include").string() + " -I" + (out / "src").string() : inc;
            if (dir == out)
                for (const char* st : { "norm", "gate_up", "act", "down" })
                    flags += " -I" + (out / st / "include").string();
            EXPECT_EQ(runCommand("cd " + dir.string() + " && cc -std=c99 -Wall -Wextra -Werror -c" + flags + " -I"
                              + KL_CUDA_INCLUDE + " src/" + P + ".c -o entry.o",
                          &log),
                0)
                << P << "\n"
                << log;
            EXPECT_EQ(runCommand("cd " + dir.string() + " && " + KL_NVCC
                              + " -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror all-warnings -c" + flags
                              + " test/pipeline_selftest.cu -o selftest.o",
                          &log),
                0)
                << P << "\n"
                << log;
        }
        fs::remove_all(out);
        fs::remove_all(dsa);
        for (const auto& b : sessions)
            fs::remove_all(b.dir);
    }

    // The shipped problems' tunable templates, exported as candidates with their reference or cuBLAS fallback:
    // every launcher compiles with nvcc, warnings as errors. sm_90a only (nvcc's -arch=sm_90a also emits
    // compute_90 PTX, which has no wgmma), as the bundle's own CMake project builds it.
    TEST(ExportBuild, ShippedProblemTemplatesExportAndCompile)
    {
        if (!fs::exists(KL_NVCC))
            GTEST_SKIP() << "nvcc not found";
        const fs::path problems = fs::path(KL_SOURCE_DIR) / "kernels/problems";
        int exported = 0;
        const std::pair<const char*, int> shipped[]
            = { { "rmsnorm", 0 }, { "softmax", 0 }, { "silu_and_mul", 0 }, { "gemm_bf16", 0 }, { "gemm_bf16", 90 },
                  { "decode_attention", 0 }, { "decode_attention", 90 }, { "fused_add_rmsnorm", 0 } };
        for (const auto& [name, arch] : shipped) {
            if (!fs::exists(problems / name / "problem.json"))
                continue;
            const Problem p = loadProblem((problems / name).string());
            // arch 90: the template chosen there (gemm: tensor maps, an SM_COUNT grid, PDL; decode_attention: the
            // tensor-core one, its split count from SM_COUNT); the dispatch test also checks the tensor-map geometry
            // the launcher encodes against the harness's.
            BuiltSession b = buildSessionFrom(
                problems / name, problems / name / (arch ? p.templateFor(arch) : p.templateFile), syntheticOutcomes(p));
            const fs::path out = kl::test::freshDir(std::string("real-") + name);
            ExportOptions o;
            o.outDir = out;
            ASSERT_NO_THROW(exportBundle(SessionStore::load(b.dir), b.problem, o)) << name;
            const std::string P = std::string("kl_") + name;
            const std::string inc = " -I" + (out / "include").string() + " -I" + (out / "src").string();
            std::string log;
            EXPECT_EQ(runCommand("cd " + out.string() + " && " + KL_NVCC
                              + " -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror all-warnings -c" + inc
                              + " src/" + P + "_candidate.cu src/" + P + "_fallback.cu src/" + P + "_run.cu",
                          &log),
                0)
                << name << "\n"
                << log;
            // The self-test draws integer inputs with meaning (page tables, lengths) for the problems that have them,
            // and restores in-place tensors before every call.
            if (std::string(name) == "decode_attention" || std::string(name) == "fused_add_rmsnorm") {
                EXPECT_EQ(runCommand("cd " + out.string() + " && " + KL_NVCC
                                  + " -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror all-warnings -c" + inc
                                  + " test/selftest.cu",
                              &log),
                    0)
                    << name << "\n"
                    << log;
            }
            EXPECT_EQ(runCommand("cd " + out.string() + " && cc -std=c99 -Wall -Wextra -Werror" + inc
                              + " -o dt test/dispatch_test.c src/" + P + "_dispatch.c -lm && ./dt",
                          &log),
                0)
                << name << "\n"
                << log;
            ++exported;
            fs::remove_all(out);
            fs::remove_all(b.dir);
        }
        if (exported == 0)
            GTEST_SKIP() << "no shipped problems in this checkout";
    }

} // namespace
} // namespace kl

namespace kl {
namespace {

    // The PyTorch op compiles against torch's headers (torch importable, or KL_TORCH_INCLUDE=<torch/include>).
    TEST(ExportBuild, TorchOpCompilesAgainstTorchHeaders)
    {
        std::string inc;
        if (const char* e = std::getenv("KL_TORCH_INCLUDE"))
            inc = e;
        std::string log;
        if (inc.empty()
            && runCommand("python3 -c \"import torch.utils.cpp_extension as c; print(c.include_paths()[0])\"", &log)
                == 0)
            inc = log.substr(0, log.find_last_not_of(" \n\r") + 1);
        if (inc.empty() || !fs::exists(fs::path(inc) / "ATen/ATen.h"))
            GTEST_SKIP() << "no torch headers (install torch or set KL_TORCH_INCLUDE)";
        BuiltSession b;
        const fs::path out = exportFixture("rmsnorm_fx", rmsnormOutcomes(), b);
        const std::string flags = " -std=c++17 -fsyntax-only -I" + inc + " -I" + inc + "/torch/csrc/api/include -I"
            + std::string(KL_CUDA_INCLUDE) + " -I" + (out / "include").string() + " -I" + (out / "src").string() + " ";
        EXPECT_EQ(runCommand("c++" + flags + (out / "torch/kl_rmsnorm_fx_op.cpp").string(), &log), 0) << log;
        // An in-place problem's op mutates its arguments and returns nothing.
        {
            const fs::path folder = fs::path(KL_SOURCE_DIR) / "kernels/problems/fused_add_rmsnorm";
            const Problem p = loadProblem(folder.string());
            BuiltSession inPlace = buildSessionFrom(folder, folder / p.templateFile, syntheticOutcomes(p));
            const fs::path inPlaceOut = kl::test::freshDir("torch-in-place");
            ExportOptions o;
            o.outDir = inPlaceOut;
            exportBundle(SessionStore::load(inPlace.dir), inPlace.problem, o);
            const std::string inPlaceFlags = " -std=c++17 -fsyntax-only -I" + inc + " -I" + inc
                + "/torch/csrc/api/include -I" + std::string(KL_CUDA_INCLUDE) + " -I"
                + (inPlaceOut / "include").string() + " -I" + (inPlaceOut / "src").string() + " ";
            EXPECT_EQ(
                runCommand("c++" + inPlaceFlags + (inPlaceOut / "torch/kl_fused_add_rmsnorm_op.cpp").string(), &log), 0)
                << log;
            fs::remove_all(inPlaceOut);
            fs::remove_all(inPlace.dir);
        }
        // The pipeline bundle's op over its entry point.
        {
            const fs::path pipeOut = kl::test::freshDir("torch-pipeline");
            ExportOptions o;
            o.outDir = pipeOut;
            exportPipeline(loadPipeline(findPipelineFolder("llama_mlp_decode")), {}, o);
            EXPECT_EQ(runCommand("c++ -std=c++17 -fsyntax-only -I" + inc + " -I" + inc + "/torch/csrc/api/include -I"
                              + std::string(KL_CUDA_INCLUDE) + " -I" + (pipeOut / "include").string() + " "
                              + (pipeOut / "torch/kl_llama_mlp_decode_op.cpp").string(),
                          &log),
                0)
                << log;
            fs::remove_all(pipeOut);
        }
        // torch.utils.cpp_extension compiles the dispatcher's .c as C++.
        EXPECT_EQ(
            runCommand(
                "c++ -x c++ -Wall -Wextra -Werror" + flags + (out / "src/kl_rmsnorm_fx_dispatch.c").string(), &log),
            0)
            << log;
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

} // namespace
} // namespace kl
