// GPU (label gpu): a real session on the device, driven by the LLM agent with scripted replies from the
// loopback server. The replies carry real rmsnorm kernels: the GPU evaluator compiles, verifies (held-out
// shapes, referee) and times them; one reply cheats and must be rejected with its rule, and the next
// request must tell the model why. Skips without a CUDA device.
#include "agent/llm/llm_agent.h"
#include "core/diff.h"
#include "core/json_io.h"
#include "core/research_loop.h"
#include "core/session_store.h"
#include "kernels/gpu_evaluator.h"
#include "loopback_server.h"
#include "tests/support/gpu_available.h"

#include <cstdio>
#include <filesystem>
#include <gtest/gtest.h>

namespace fs = std::filesystem;
using namespace kl;
using nlohmann::json;

TEST(LlmAgentOnGpu, ScriptedRepliesWithRealKernelsAreCompiledVerifiedAndTimed)
{
    REQUIRE_GPU();
    const Problem problem = loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm");
    const std::string tmpl = readFile(fs::path(problem.folder) / problem.templateFile);
    auto replace = [](std::string s, const std::string& from, const std::string& to) {
        const auto at = s.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        if (at != std::string::npos)
            s.replace(at, from.size(), to);
        return s;
    };
    // 1: an honest change of defaults, sent as a diff. 2: a cheat (reads the clock). 3: another honest one.
    const std::string wide = replace(tmpl, "// @kl:param THREADS = 256 in", "// @kl:param THREADS = 512 in");
    const std::string cheat = replace(tmpl, "    const int sub = threadIdx.x / tpr;",
        "    const long long started = clock64();\n"
        "    const int sub = threadIdx.x / tpr + (started < 0);");
    const std::string rows = replace(tmpl, "// @kl:param MINTPR = 32 in", "// @kl:param MINTPR = 64 in");

    test::LoopbackServer server;
    server.enqueue(test::openAiStream(test::piecesOf("NOTE: 512 threads per row\n```kl-diff\n"
            + unifiedDiff(tmpl, wide, "a/candidate.cu", "b/candidate.cu") + "```\n",
        80)));
    server.enqueue(test::openAiStream(test::piecesOf("NOTE: timing-aware\n```kl-candidate\n" + cheat + "```\n", 80)));
    server.enqueue(
        test::openAiStream(test::piecesOf("NOTE: two warps per row at least\n```kl-candidate\n" + rows + "```\n", 80)));
    // If the budget has room for a fourth proposal, the model has nothing more: three unusable replies make
    // propose() return none, so the loop finishes instead of waiting on a server with no script left.
    for (int i = 0; i < 3; ++i)
        server.enqueue(test::openAiStream({ "I have no further idea." }));

    const char* out = std::getenv("OUT");
    const fs::path dir
        = (out && *out ? fs::path(out) : fs::temp_directory_path()) / ("llm-gpu-session-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    GpuEvaluatorOptions eo;
    eo.compileCacheDir = fs::temp_directory_path() / "kl-llm-gpu-cache";
    if (const char* w = std::getenv("KL_WORKER"))
        eo.worker.command = { w };
    GpuEvaluator evaluator(problem, eo);

    Session header;
    header.id = "llm-gpu";
    header.problemName = problem.name;
    header.problemFolder = problem.folder;
    header.device = evaluator.device();
    header.settings.agent = "llm:vllm";
    header.settings.budget.maxEvaluations = 4;
    header.settings.autoApproveLlm = true;
    auto store = SessionStore::create(dir, header);
    Candidate seed = evaluator.templateCandidate({}, "");
    seed.id.clear();
    seed.author = Author::Human;
    seed.agent = "problem:template";
    store->proposeCandidate(seed);
    Hypothesis h;
    h.id = "h0001";
    h.text = "More threads per row hide more DRAM latency";
    h.createdMs = nowMs();
    store->addHypothesis(h);

    LlmAgentSettings s = llmAgentSettingsFor("llm:vllm", { { "llm.model", "scripted" } });
    s.provider.baseUrl = server.baseUrl();
    s.autoApprove = true;
    s.defaultContextRoots = false;
    s.contextDirs = { fs::path(KL_SOURCE_DIR) / "context" };
    LlmAgentHooks hooks;
    hooks.record = [&](const json& j) { store->agentMessage(j); };
    LlmAgent agent(s, hooks);
    LoopOptions lo;
    lo.evaluate.maxSecondsPerShape = 0.3;
    lo.evaluate.heldOutCount = 3;
    ResearchLoop loop(*store, evaluator, agent, lo);
    const LoopResult result = loop.run();
    EXPECT_NE(result.state, "failed") << result.reason;

    const Session& session = store->session();
    std::vector<CandidateId> llm;
    for (const auto& id : session.tree.order())
        if (session.tree.at(id).author == Author::Llm)
            llm.push_back(id);
    ASSERT_EQ(llm.size(), 3u) << result.reason;
    for (const auto& id : llm) {
        const Candidate& c = session.tree.at(id);
        ASSERT_TRUE(session.evaluations.count(id)) << id;
        const Evaluation& e = session.evaluations.at(id);
        std::printf(
            "%s %-13s %-10s objective %.3f", id.c_str(), statusName(c.status), verdictName(e.verdict), e.objective);
        for (const auto& r : e.reasons)
            std::printf("  [%s: %s]", r.rule.c_str(), r.message.c_str());
        for (const auto& sr : e.shapes)
            if (sr.timing && !sr.heldOut)
                std::printf("\n    %s %.2f us (baseline %.2f us)", sr.shape.label().c_str(), sr.timing->medianUs,
                    sr.baselineTiming ? sr.baselineTiming->medianUs : 0.0);
        std::printf("\n");
    }
    const Evaluation& first = session.evaluations.at(llm[0]);
    EXPECT_TRUE(first.correctEverywhere()) << llm[0];
    EXPECT_GT(first.objective, 0);
    const Evaluation& cheated = session.evaluations.at(llm[1]);
    EXPECT_EQ(session.tree.at(llm[1]).status, CandidateStatus::Rejected);
    const bool timerRule = std::any_of(cheated.reasons.begin(), cheated.reasons.end(),
        [](const VerdictReason& r) { return r.rule == "static.timer-read"; });
    EXPECT_TRUE(timerRule);
    EXPECT_TRUE(session.evaluations.at(llm[2]).correctEverywhere()) << llm[2];
    // The third request told the model why the second was rejected.
    const auto reqs = server.requests();
    ASSERT_GE(reqs.size(), 3u);
    const std::string third = json::parse(reqs[2].body)["messages"][1]["content"];
    EXPECT_NE(third.find("static.timer-read"), std::string::npos);
    EXPECT_NE(third.find(header.device.name), std::string::npos);
}
