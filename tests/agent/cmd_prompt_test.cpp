// kloop prompt, run as a process.
#include "core/json_io.h"
#include "core/session_store.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <gtest/gtest.h>
#include <memory>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kFixtures = fs::path(KL_SOURCE_DIR) / "tests" / "agent" / "fixtures";

int run(const std::string& args, std::string& out)
{
    const std::string cmd = std::string(KLOOP_PATH) + " " + args + " 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p)
        return -1;
    std::array<char, 4096> buf {};
    out.clear();
    while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p))
        out.append(buf.data(), n);
    const int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

TEST(KloopPrompt, PrintsTheExactPromptForAnArchitecture)
{
    std::string out;
    ASSERT_EQ(run("prompt --problem " + (kFixtures / "rmsnorm_mini").string()
                      + " --arch sm_120 --no-user-context --hypothesis 'Try two rows per warp' --json",
                  out),
        0)
        << out;
    const json j = json::parse(out);
    EXPECT_EQ(j["problem"], "rmsnorm_mini");
    EXPECT_EQ(j["arch"], 120);
    const std::string sys = j["system"];
    const std::string user = j["user"];
    EXPECT_NE(sys.find("hardware/blackwell-consumer-sm120.md"), std::string::npos);
    EXPECT_EQ(sys.find("hardware/hopper-sm90.md"), std::string::npos);
    EXPECT_NE(user.find("> Try two rows per warp"), std::string::npos);
    EXPECT_NE(user.find("Candidate template"), std::string::npos);
    bool sawRules = false;
    for (const auto& f : j["context_files"])
        sawRules |= f["section"] == "rules";
    EXPECT_TRUE(sawRules);

    std::string text;
    ASSERT_EQ(
        run("prompt --problem " + (kFixtures / "rmsnorm_mini").string() + " --arch sm_90 --no-user-context", text), 0);
    EXPECT_EQ(text.rfind("======== system message ========", 0), 0u);
    EXPECT_NE(text.find("======== user message ========"), std::string::npos);
}

TEST(KloopPrompt, UsesASessionsStateAndRejectsBadArguments)
{
    const fs::path dir = fs::temp_directory_path() / ("kl_prompt_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    {
        kl::Session header;
        header.id = "cli";
        header.problemName = "rmsnorm_mini";
        header.problemFolder = (kFixtures / "rmsnorm_mini").string();
        header.device.name = "NVIDIA H200";
        header.device.ccMajor = 9;
        auto store = kl::SessionStore::create(dir, header);
        kl::Candidate c;
        c.source = kl::readFile(kFixtures / "rmsnorm_mini" / "template.cu");
        c.params = { { "BLOCK", 256 } };
        store->proposeCandidate(c);
        kl::Hypothesis h;
        h.id = "h0001";
        h.text = "Cache w in shared memory";
        h.createdMs = kl::nowMs();
        store->addHypothesis(h);
    }
    std::string out;
    ASSERT_EQ(run("prompt --session " + dir.string() + " --no-user-context --json", out), 0) << out;
    const json j = json::parse(out);
    EXPECT_EQ(j["device"], "NVIDIA H200");
    const std::string user = j["user"];
    EXPECT_NE(user.find("Candidate c0001"), std::string::npos);
    EXPECT_NE(user.find("> Cache w in shared memory"), std::string::npos);
    fs::remove_all(dir);

    EXPECT_EQ(run("prompt", out), 2);
    EXPECT_EQ(run("prompt --problem " + (kFixtures / "rmsnorm_mini").string() + " --arch hopper", out), 1);
    EXPECT_EQ(run("prompt --problem /nonexistent/problem", out), 1);
}

TEST(KloopPrompt, HopperPromptCarriesTheTensorMapFormatAndTheSm90Template)
{
    const std::string gemm = (fs::path(KL_SOURCE_DIR) / "kernels" / "problems" / "gemm_bf16").string();
    std::string out;
    ASSERT_EQ(run("prompt --problem " + gemm + " --arch sm_90a --no-user-context --json", out), 0) << out;
    const json j = json::parse(out);
    const std::string sys = j["system"];
    const std::string user = j["user"];
    EXPECT_NE(sys.find("hardware/hopper-sm90-candidates.md"), std::string::npos);
    for (const char* fact :
        { "// @kl:tensormap tmA tensor=A box=(64, BM) swizzle=128B", "const __grid_constant__ TensorMap",
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "mbarrier.try_wait.parity.shared::cta.b64",
            "mbarrier.arrive.expect_tx", "griddepcontrol.wait", "SM_COUNT", "cluster=(2, 1, 1)" })
        EXPECT_NE(sys.find(fact), std::string::npos) << fact;
    // The template shown to the model is the sm_90a one on Hopper and the portable one below it.
    EXPECT_NE(user.find("@kl:tensormap tmA"), std::string::npos);
    ASSERT_EQ(run("prompt --problem " + gemm + " --arch sm_80 --no-user-context --json", out), 0) << out;
    const json ampere = json::parse(out);
    EXPECT_EQ(std::string(ampere["system"]).find("hopper-sm90-candidates.md"), std::string::npos);
    EXPECT_EQ(std::string(ampere["user"]).find("@kl:tensormap"), std::string::npos);
    EXPECT_NE(std::string(ampere["user"]).find("wmma::fragment"), std::string::npos);
}
