// Exporting a Triton candidate: a session tuned with `kloop run --language triton` against the worker test double,
// exported with `kloop export`. The bundle ships Triton's CUBIN (raw and embedded) with a driver-API launcher behind
// the same dispatcher and reference-kernel fallback as a CUDA candidate, and the Triton source for PyTorch. Its own
// CMake project builds without a GPU (the dispatch test runs, the self-test skips); on a GPU the self-test loads the
// CUBIN and matches the reference kernel (ExportTritonGpu).
#include "core/json_io.h"
#include "core/session_store.h"
#include "kernels/triton/triton_compiler.h"
#include "tests/support/gpu_available.h"
#include "tests/support/kloop_process.h"
#include "tests/support/text_file.h"

#include <gtest/gtest.h>
#include <random>
#include <regex>

namespace kl {
namespace {

    namespace fs = std::filesystem;

    int runCommand(const std::string& cmd, const fs::path& log, std::string* output)
    {
        const int rc = std::system((cmd + " > " + log.string() + " 2>&1").c_str());
        *output = kl::test::readTextFile(log);
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    }

    // One session and one bundle for the whole suite: kloop run with the Triton template, then kloop export.
    class ExportTriton : public ::testing::Test {
    protected:
        static void SetUpTestSuite()
        {
            if (tritonVersion(&s_why).empty())
                return;
            s_scratch = fs::temp_directory_path() / ("kl-export-triton-" + std::to_string(std::random_device {}()));
            fs::create_directories(s_scratch);
            const std::map<std::string, std::string> env = { { "KL_WORKER", KL_FAKE_WORKER_PATH },
                { "HOME", (s_scratch / "home").string() }, { "KL_CACHE_DIR", (s_scratch / "cache").string() },
                { "KL_PROBLEMS_DIR", "" }, { "KL_TRITON_PYTHON", tritonPython() } };
            const auto run = clitest::runKloop(
                { "run", "--problem", "rmsnorm", "--language", "triton", "--agent", "tuner:random", "--regimes",
                    "single", "--budget", "4", "--no-tuning-db", "--session", (s_scratch / "session").string() },
                env, s_scratch);
            if (run.exitCode != 0) {
                s_why = "kloop run failed: " + run.err + run.out;
                return;
            }
            const auto exported = clitest::runKloop(
                { "export", (s_scratch / "session").string(), "--out", (s_scratch / "bundle").string(), "--json" }, env,
                s_scratch);
            if (exported.exitCode != 0) {
                s_why = "kloop export failed: " + exported.err + exported.out;
                return;
            }
            s_exportJson = nlohmann::json::parse(exported.out);
            s_ready = true;
        }
        static void TearDownTestSuite()
        {
            std::error_code ec;
            if (!s_scratch.empty())
                fs::remove_all(s_scratch, ec);
        }
        void SetUp() override
        {
            if (s_why.find("Triton is not available") != std::string::npos || s_why.find("pins") != std::string::npos)
                GTEST_SKIP() << s_why;
            ASSERT_TRUE(s_ready) << s_why;
            manifest = nlohmann::json::parse(kl::test::readTextFile(bundle() / "manifest.json"));
            session = SessionStore::load(s_scratch / "session");
        }
        static fs::path bundle() { return s_scratch / "bundle"; }
        const Candidate& exported() const { return session.tree.at(manifest.at("candidate").at("id")); }

        // The bundle's own CMake project, configured and built once (nvcc for the fallback, the host compiler for
        // the rest); ctest's output in *log.
        static bool buildBundle(std::string* log)
        {
            static int rc = -1;
            static std::string buildLog;
            if (rc < 0) {
                const fs::path b = bundle() / "build";
                const std::string gen = std::system("command -v ninja > /dev/null 2>&1") == 0 ? " -G Ninja" : "";
                rc = runCommand(std::string(KL_CMAKE) + " -S " + bundle().string() + " -B " + b.string() + gen
                        + " -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=" + KL_NVCC + " && " + KL_CMAKE
                        + " --build " + b.string() + " -j2",
                    s_scratch / "build.log", &buildLog);
            }
            *log = buildLog;
            return rc == 0;
        }

        static inline fs::path s_scratch;
        static inline std::string s_why;
        static inline bool s_ready = false;
        static inline nlohmann::json s_exportJson;
        nlohmann::json manifest;
        Session session;
    };

    TEST_F(ExportTriton, ManifestRecordsTritonsBuildOfTheMeasuredCandidate)
    {
        const Candidate& c = exported();
        EXPECT_EQ(detectLanguage(c.source), KernelLanguage::Triton);
        EXPECT_EQ(manifest["candidate"]["language"], "triton");
        EXPECT_EQ(manifest["candidate"]["source_sha256"], sha256Hex(c.source));
        const auto& t = manifest.at("triton");
        EXPECT_EQ(t["version"].get<std::string>().rfind("3.6.", 0), 0u) << t.dump();
        EXPECT_EQ(t["kernel"], "rmsnorm_triton");
        // The launch the session measured: num_warps and num_stages are the candidate's WARPS and STAGES.
        EXPECT_EQ(t["num_warps"].get<std::int64_t>(), c.params.at("WARPS"));
        EXPECT_EQ(t["num_stages"].get<std::int64_t>(), c.params.at("STAGES"));
        EXPECT_EQ(t["threads_per_block"].get<std::int64_t>(), 32 * c.params.at("WARPS"));
        ASSERT_TRUE(t["cubins"].contains("sm_90a")) << t.dump() << ": the arch of the session's device";
        const auto& cubin = t["cubins"]["sm_90a"];
        EXPECT_EQ(cubin["trailing_null_pointers"], 2) << "Triton 3.6 appends global and profile scratch";
        EXPECT_EQ(cubin["symbol"], "rmsnorm_triton");
        const std::string bytes = kl::test::readTextFile(bundle() / cubin["file"].get<std::string>());
        EXPECT_EQ(bytes.substr(0, 4),
            std::string("\x7f"
                        "ELF",
                4));
        EXPECT_EQ(cubin["sha256"], sha256Hex(bytes));
        EXPECT_EQ(manifest["files"][cubin["file"].get<std::string>()], sha256Hex(bytes));
        EXPECT_NE(kl::test::readTextFile(bundle() / "include/kl_rmsnorm.h").find("Triton 3.6"), std::string::npos)
            << "the provenance banner names Triton's build";
    }

    TEST_F(ExportTriton, LauncherLoadsTheEmbeddedCubinThroughTheDriverApi)
    {
        // The embedded array holds exactly the shipped CUBIN's bytes.
        const std::string table = kl::test::readTextFile(bundle() / "src/kl_rmsnorm_candidate_cubin.h");
        const auto open = table.find("kl_rmsnorm_cubin_sm_90a[] = {");
        ASSERT_NE(open, std::string::npos);
        std::string embedded;
        const std::string body = table.substr(open, table.find("};", open) - open);
        const std::regex hex("0x([0-9a-f]{2})");
        for (auto it = std::sregex_iterator(body.begin(), body.end(), hex); it != std::sregex_iterator(); ++it)
            embedded += static_cast<char>(std::stoi((*it)[1].str(), nullptr, 16));
        EXPECT_EQ(embedded, kl::test::readTextFile(bundle() / "cubin/kl_rmsnorm_candidate.sm_90a.cubin"));
        EXPECT_NE(table.find("{ \"sm_90a\", 9, 0, 1, kl_rmsnorm_cubin_sm_90a, sizeof(kl_rmsnorm_cubin_sm_90a), "
                             "\"rmsnorm_triton\", "),
            std::string::npos)
            << "arch 9.0, arch-specific, the symbol";

        const std::string launcher = kl::test::readTextFile(bundle() / "src/kl_rmsnorm_candidate.cu");
        for (const char* needed : { "cudaGetDriverEntryPointByVersion(#symbol", "KL_ENTRY(cuModuleLoadData",
                 "KL_ENTRY(cuLaunchKernelEx", "moduleLoadData(&l.module, kl_rmsnorm_cubins[c].data)",
                 "launchKernelEx(&kl_cfg, kl_loaded_fn->fn, kl_args, NULL)", "trailing_null_pointers",
                 "kl_smem += kl_rmsnorm_cubins[kl_loaded_fn->cubin].shared_bytes", "float kl_a5 = eps;",
                 "int kl_a3 = (int)dims->T;" })
            EXPECT_NE(launcher.find(needed), std::string::npos) << needed;
        const std::int64_t warps = exported().params.at("WARPS");
        EXPECT_NE(
            launcher.find("klx_to_int((32.0 * " + std::to_string(warps) + ".0), 1, 1024, &kl_b[0])"), std::string::npos)
            << "num_warps * 32 threads";
        EXPECT_EQ(launcher.find("cudaLaunchKernel("), std::string::npos);
        EXPECT_FALSE(fs::exists(bundle() / "src/kl_rmsnorm_candidate.cuh")) << "no device source for nvcc";
        // The dispatcher falls back where the CUBIN cannot run.
        const std::string run = kl::test::readTextFile(bundle() / "src/kl_rmsnorm_run.cu");
        EXPECT_NE(run.find("if (!kl_rmsnorm_candidate_available(stream))\n            return kl_rmsnorm_run_fallback("),
            std::string::npos)
            << run;
        EXPECT_NE(run.find("kl_rmsnorm_init(void) { return kl_rmsnorm_candidate_init(); }"), std::string::npos);
    }

    TEST_F(ExportTriton, DispatchTableAndFallbackAreTheCudaBundles)
    {
        const auto& d = manifest.at("dispatch");
        EXPECT_EQ(d["fallback"]["kind"], "reference-kernel");
        EXPECT_EQ(d["fallback"]["name"], "reference.cu");
        ASSERT_FALSE(d["candidate_regions"].empty()) << d.dump();
        EXPECT_EQ(s_exportJson["candidate_regions"].size(), d["candidate_regions"].size());
        EXPECT_TRUE(fs::exists(bundle() / "src/kl_rmsnorm_fallback.cuh"));
        const std::string dispatch = kl::test::readTextFile(bundle() / "src/kl_rmsnorm_dispatch.c");
        for (const auto& r : d["candidate_regions"]) {
            const auto& T = r["ranges"]["T"];
            EXPECT_NE(dispatch.find("{{" + std::to_string(T[0].get<long long>()) + "LL"), std::string::npos)
                << r.dump();
        }
    }

    TEST_F(ExportTriton, BundleBuildsWithItsCMakeProjectAndCtestPasses)
    {
        std::string log;
        ASSERT_TRUE(buildBundle(&log)) << log;
        const fs::path b = bundle() / "build";
        ASSERT_EQ(runCommand("cd " + b.string() + " && ctest --output-on-failure", s_scratch / "ctest.log", &log), 0)
            << log;
        EXPECT_NE(log.find("dispatch"), std::string::npos) << log;
        // The launcher and the dispatcher's entry compile warning-free, as the CUDA bundle's do.
        EXPECT_EQ(runCommand("cd " + bundle().string() + " && " + KL_NVCC
                          + " -std=c++17 -arch=sm_90a -Werror all-warnings -Xcompiler -Wall,-Wextra -Iinclude -Isrc -c "
                            "src/kl_rmsnorm_candidate.cu src/kl_rmsnorm_run.cu -odir "
                          + b.string(),
                      s_scratch / "werror.log", &log),
            0)
            << log;
        // The driver is reached through the runtime: nothing links libcuda, so the self-test starts (and skips)
        // on a machine without a driver instead of failing to load.
        EXPECT_NE(runCommand("ldd " + (b / "kl_rmsnorm_selftest").string() + " | grep -q libcuda.so",
                      s_scratch / "ldd.log", &log),
            0)
            << log;
    }

    TEST_F(ExportTriton, TritonSourceModuleImportsWithThePinnedTriton)
    {
        const std::string py = kl::test::readTextFile(bundle() / "torch/kl_rmsnorm_triton.py");
        EXPECT_NE(py.find(exported().source.substr(exported().source.find("@triton.jit"))), std::string::npos)
            << "the measured source, verbatim";
        std::string log;
        const std::string script = "import importlib.util, sys\n"
                                   "spec = importlib.util.spec_from_file_location('t', sys.argv[1])\n"
                                   "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
                                   "k = getattr(m, m.KL_KERNEL)\n"
                                   "print(type(k).__name__, m.KL_NUM_WARPS, m.KL_NUM_STAGES, m.KL_PARAMS['BLOCK'],"
                                   " [n for n in m.KL_PARAMS if n in k.arg_names], m.KL_ARGS)\n"
                                   "try:\n    m.kl_launch([4, 4096], {'y': 0})\nexcept ValueError as e:\n"
                                   "    print('refused:', e)\n";
        std::ofstream(s_scratch / "probe.py") << script;
        ASSERT_EQ(runCommand(tritonPython() + " " + (s_scratch / "probe.py").string() + " "
                          + (bundle() / "torch/kl_rmsnorm_triton.py").string(),
                      s_scratch / "probe.log", &log),
            0)
            << log;
        const auto& p = exported().params;
        EXPECT_NE(log.find("JITFunction " + std::to_string(p.at("WARPS")) + " " + std::to_string(p.at("STAGES")) + " "
                      + std::to_string(p.at("BLOCK")) + " ['BLOCK'] ['y', 'x', 'w', 'T', 'H', 'eps']"),
            std::string::npos)
            << log;
        EXPECT_NE(log.find("refused: kl_rmsnorm: kl_launch needs x, w, eps"), std::string::npos) << log;
        const std::string loader = kl::test::readTextFile(bundle() / "torch/kl_rmsnorm.py");
        EXPECT_NE(loader.find("def load_triton():"), std::string::npos);
        EXPECT_NE(kl::test::readTextFile(bundle() / "torch/kl_rmsnorm_op.cpp").find("candidate_grid(int[] dims)"),
            std::string::npos);
    }

    TEST_F(ExportTriton, WithoutTritonTheExportFailsNamingWhyAndWritesNothing)
    {
        const fs::path out = s_scratch / "no-triton-bundle";
        const auto r = clitest::runKloop({ "export", (s_scratch / "session").string(), "--out", out.string() },
            { { "HOME", (s_scratch / "home").string() }, { "KL_TRITON_PYTHON", "/nonexistent/python3" } }, s_scratch);
        EXPECT_NE(r.exitCode, 0);
        EXPECT_NE(r.err.find("the candidate is Triton and its CUBIN is compiled at export: Triton is not available"),
            std::string::npos)
            << r.err;
        EXPECT_NE(r.err.find("/nonexistent/python3"), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(out));
    }

    // On the GPU: the bundle's self-test loads the CUBIN through the launcher and matches the reference kernel on
    // the measured shapes and fresh random ones, through the dispatcher and under CUDA-graph capture.
    TEST_F(ExportTriton, GpuSelftestLoadsTheCubinAndMatchesTheReference)
    {
        REQUIRE_GPU();
        std::string log;
        ASSERT_TRUE(buildBundle(&log)) << log;
        const int rc
            = runCommand((bundle() / "build" / "kl_rmsnorm_selftest").string(), s_scratch / "selftest.log", &log);
        ASSERT_EQ(rc, 0) << log;
        EXPECT_NE(log.find("SELFTEST PASSED"), std::string::npos) << log;
        EXPECT_NE(log.find("candidate y      rel_l2"), std::string::npos) << "the candidate ran\n" << log;
        EXPECT_EQ(log.find("FAIL"), std::string::npos) << log;
        EXPECT_NE(log.find("CUDA graph capture + replay of the dispatcher: ok"), std::string::npos) << log;
    }

} // namespace
} // namespace kl
