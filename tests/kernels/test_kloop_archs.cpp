// The declared architectures through the real kloop: `kloop problems` lists them; `kloop eval` and `kloop run`
// refuse a device older than the problem's min_arch, and a configuration its architecture lacks, before anything
// compiles (with --compile-only --arch, and against kl_test_fake_worker posing as an older card).
#include "tests/support/kloop_process.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>

namespace {

using kl::clitest::ProcessResult;
using kl::clitest::runKloop;
namespace fs = std::filesystem;

class KloopArchs : public ::testing::Test {
protected:
    void SetUp() override
    {
        scratch = fs::temp_directory_path() / ("kl-kloop-archs-" + std::to_string(std::random_device {}()));
        fs::create_directories(scratch);
    }
    void TearDown() override { fs::remove_all(scratch); }

    // The fake worker poses as a card of this architecture ("" = the double's own sm_90a).
    std::map<std::string, std::string> env(const std::string& workerArch = "") const
    {
        return { { "KL_WORKER", KL_FAKE_WORKER_PATH }, { "KL_FAKE_WORKER_ARCH", workerArch },
            { "HOME", (scratch / "home").string() }, { "KL_CACHE_DIR", (scratch / "cache").string() },
            { "KL_PROBLEMS_DIR", "" } };
    }
    ProcessResult kloop(const std::vector<std::string>& args, const std::string& workerArch = "") const
    {
        return runKloop(args, env(workerArch), scratch);
    }

    fs::path scratch;
};

TEST_F(KloopArchs, ProblemsListsTheOldestArchitectureOfEach)
{
    const ProcessResult text = kloop({ "problems" });
    ASSERT_EQ(text.exitCode, 0) << text.err;
    std::map<std::string, std::string> shown;
    std::istringstream lines(text.out);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string name, archs;
        words >> name >> archs;
        shown[name] = archs;
    }
    EXPECT_EQ(shown["gemm_bf16"], "sm_80+");
    EXPECT_EQ(shown["softmax"], "sm_75+");
    EXPECT_EQ(shown["rmsnorm"], "sm_75+");
    EXPECT_EQ(shown["dsa_indexer"], "sm_80+");

    const ProcessResult json = kloop({ "problems", "--json" });
    ASSERT_EQ(json.exitCode, 0) << json.err;
    for (const auto& row : nlohmann::json::parse(json.out)) {
        const bool tensorCores = row.at("name") == "gemm_bf16" || row.at("name") == "dsa_indexer";
        EXPECT_EQ(row.at("min_arch"), tensorCores ? "sm_80" : "sm_75") << row.dump();
    }
}

TEST_F(KloopArchs, CompileOnlyRefusesAnArchitectureTheProblemDoesNotSupport)
{
    const ProcessResult r = kloop({ "eval", "gemm_bf16", "--compile-only", "--arch", "sm_75" });
    EXPECT_EQ(r.exitCode, 1);
    EXPECT_NE(r.err.find("problem 'gemm_bf16' supports sm_80 and newer (problem.json \"min_arch\"); this device is "
                         "sm_75 (nothing compiled)"),
        std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
    const ProcessResult bad = kloop({ "eval", "gemm_bf16", "--compile-only", "--arch", "ampere" });
    EXPECT_EQ(bad.exitCode, 2);
    EXPECT_NE(bad.err.find("--arch 'ampere' is not an architecture"), std::string::npos) << bad.err;
}

TEST_F(KloopArchs, CompileOnlyRefusesClustersBelowSm90AndCompilesTheDefaults)
{
    const ProcessResult clustered
        = kloop({ "eval", "softmax", "--compile-only", "--arch", "sm_86", "--params", "CLUSTER=8" });
    EXPECT_EQ(clustered.exitCode, 1);
    EXPECT_NE(clustered.err.find("device.arch: constraint 'CLUSTER == 1 || ARCH >= 90'"), std::string::npos)
        << clustered.err;
    EXPECT_NE(clustered.err.find("does not hold on sm_86 (ARCH = 86) (nothing compiled)"), std::string::npos)
        << clustered.err;

    const ProcessResult defaults = kloop({ "eval", "softmax", "--compile-only", "--arch", "sm_86" });
    EXPECT_EQ(defaults.exitCode, 0) << defaults.out << defaults.err;
    EXPECT_NE(defaults.out.find("compiled for sm_86"), std::string::npos) << defaults.out;

    const ProcessResult hopper
        = kloop({ "eval", "softmax", "--compile-only", "--arch", "sm_90a", "--params", "CLUSTER=8" });
    EXPECT_EQ(hopper.exitCode, 0) << hopper.out << hopper.err;
    EXPECT_NE(hopper.out.find("compiled for sm_90a"), std::string::npos) << hopper.out;
}

TEST_F(KloopArchs, EvalAndRunOnAnOlderDeviceAreRefusedBeforeCompiling)
{
    const ProcessResult gemm = kloop({ "eval", "gemm_bf16" }, "sm_75");
    EXPECT_EQ(gemm.exitCode, 1);
    EXPECT_NE(
        gemm.err.find("supports sm_80 and newer (problem.json \"min_arch\"); this device is sm_75"), std::string::npos)
        << gemm.err;
    EXPECT_EQ(gemm.out.find("verdict"), std::string::npos) << gemm.out;

    const ProcessResult softmax = kloop({ "eval", "softmax", "--params", "CLUSTER=4" }, "sm_89");
    EXPECT_EQ(softmax.exitCode, 1);
    // The refusal names the constraint, its line in the template and the device.
    EXPECT_NE(softmax.err.find("device.arch: constraint 'CLUSTER == 1 || ARCH >= 90' (line "), std::string::npos)
        << softmax.err;
    EXPECT_NE(softmax.err.find(") does not hold on sm_89"), std::string::npos) << softmax.err;
    EXPECT_EQ(softmax.out.find("verdict"), std::string::npos) << softmax.out;

    const fs::path session = scratch / "runs" / "gemm";
    const ProcessResult run = kloop(
        { "run", "--problem", "gemm_bf16", "--agent", "tuner:random", "--budget", "1", "--session", session.string() },
        "sm_75");
    EXPECT_EQ(run.exitCode, 1);
    EXPECT_NE(run.err.find("kloop run: problem 'gemm_bf16' supports sm_80 and newer"), std::string::npos) << run.err;
    EXPECT_FALSE(fs::exists(session)) << "a refused run writes no session";
}

} // namespace
