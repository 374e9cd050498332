// The research loop driven by the LLM agent against the loopback server. Candidates are compiled for
// real with NVRTC (no GPU needed) when the toolkit is present; verification and timing come from a
// deterministic stand-in, because CI has no GPU (the H200 run uses the GPU evaluator).
#include "agent/llm/llm_agent.h"
#include "core/diff.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/research_loop.h"
#include "core/session_store.h"
#include "loopback_server.h"
#include "tests/core/synthetic_evaluator.h"
#ifdef KL_TEST_HAVE_NVRTC
#include "kernels/nvrtc_compiler.h"
#endif

#include <chrono>
#include <filesystem>
#include <gtest/gtest.h>
#include <thread>

namespace fs = std::filesystem;
using namespace kl;
using nlohmann::json;

namespace {

const fs::path kFixtures = fs::path(KL_SOURCE_DIR) / "tests" / "agent" / "fixtures";

// FOR TESTS ONLY: compiles for real, times by formula (BLOCK=512 is the fast configuration).
class CompilingStandInEvaluator final : public Evaluator {
public:
    explicit CompilingStandInEvaluator(Problem p)
        : m_problem(std::move(p))
    {
        m_device.name = "Stand-in H200";
        m_device.ccMajor = 9;
        m_device.arch = "sm_90a";
        m_device.smCount = 132;
        m_device.sharedPerBlock = 48 * 1024;
        m_device.sharedPerBlockOptin = 227 * 1024;
        m_device.maxThreadsPerBlock = 1024;
        m_device.regsPerBlock = 65536;
    }
    const DeviceInfo& device() const override { return m_device; }
    const Problem& problem() const override { return m_problem; }

    CompileReport compile(const Candidate& c) override
    {
        CompileReport r;
        KernelSpec spec;
        try {
            spec = parseKernelSpec(c.source);
        } catch (const InputError& e) {
            r.log = e.what();
            return r;
        }
#ifdef KL_TEST_HAVE_NVRTC
        CompileJob job;
        job.source = c.source;
        job.params = c.params;
        job.arch = "sm_90a";
        for (const auto& l : spec.launches)
            job.kernels.push_back(l.kernel);
        return m_compiler.compile(job)->report;
#else
        r.ok = c.source.find("undeclared_identifier") == std::string::npos;
        r.log = r.ok ? "" : "candidate.cu(12): error: identifier \"undeclared_identifier\" is undefined";
        return r;
#endif
    }

    Evaluation evaluate(const Candidate& c, const EvaluateOptions&, const CancelToken&) override
    {
        Evaluation e;
        e.candidateId = c.id;
        e.compile = compile(c);
        if (!e.compile.ok) {
            e.verdict = Verdict::CompileFailed;
            e.reasons.push_back({ "compile.error", e.compile.log, 0, true });
            return e;
        }
        e.verdict = Verdict::Correct;
        const double block = double(c.params.count("BLOCK") ? c.params.at("BLOCK") : 256);
        for (const Shape& s : m_problem.tuningShapes) {
            ShapeResult r;
            r.shape = s;
            r.correct = true;
            CorrectnessStats cs;
            cs.passed = true;
            cs.relL2 = 1e-3;
            r.checks.push_back(cs);
            const double t = 10.0 * (1.0 + 0.3 * std::abs(std::log2(block / 512.0)));
            r.timing = testonly::syntheticTiming(t);
            r.baselineTiming = testonly::syntheticTiming(20.0);
            r.speedup = 20.0 / t;
            r.speedupCiLow = r.speedup * 0.99;
            r.speedupCiHigh = r.speedup * 1.01;
            e.shapes.push_back(r);
        }
        ++evaluated;
        std::lock_guard lock(m_mutex);
        m_evaluatedIds.push_back(c.id);
        return e;
    }
    bool wasEvaluated(const CandidateId& id) const
    {
        std::lock_guard lock(m_mutex);
        return std::find(m_evaluatedIds.begin(), m_evaluatedIds.end(), id) != m_evaluatedIds.end();
    }
    std::atomic<int> evaluated { 0 };

private:
    Problem m_problem;
    DeviceInfo m_device;
    mutable std::mutex m_mutex;
    std::vector<CandidateId> m_evaluatedIds;
#ifdef KL_TEST_HAVE_NVRTC
    NvrtcCompiler m_compiler { fs::path(), 1 };
#endif
};

struct LoopFixture : ::testing::Test {
    test::LoopbackServer server;
    fs::path dir;
    Problem problem;
    std::string templateSource;

    void SetUp() override
    {
        dir = fs::temp_directory_path()
            / ("kl_llm_loop_" + std::to_string(::getpid()) + "_"
                + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir);
        problem = loadProblem((kFixtures / "rmsnorm_mini").string());
        templateSource = readFile(kFixtures / "rmsnorm_mini" / "template.cu");
    }
    void TearDown() override { fs::remove_all(dir); }

    std::unique_ptr<SessionStore> newSession(int maxEvaluations, bool autoApprove)
    {
        Session header;
        header.id = "llm-loop";
        header.problemName = problem.name;
        header.problemFolder = problem.folder;
        header.settings.agent = "llm:vllm";
        header.settings.budget.maxEvaluations = maxEvaluations;
        header.settings.autoApproveLlm = autoApprove;
        auto store = SessionStore::create(dir, header);
        Candidate seed;
        seed.source = templateSource;
        seed.params = parseKernelSpec(templateSource).defaults();
        seed.author = Author::Human;
        seed.agent = "problem:template";
        store->proposeCandidate(seed);
        Hypothesis h;
        h.id = "h0001";
        h.text = "A 512-thread block halves the loop trips for H=4096";
        h.createdMs = nowMs();
        store->addHypothesis(h);
        return store;
    }

    LlmAgentSettings settings()
    {
        LlmAgentSettings s = llmAgentSettingsFor("llm:vllm", { { "llm.model", "loop-model" } });
        s.provider.baseUrl = server.baseUrl();
        s.provider.backoffBaseMs = 5;
        s.defaultContextRoots = false;
        s.contextDirs = { kFixtures / "context" };
        return s;
    }

    std::string withBlock512() const
    {
        std::string s = templateSource;
        s.replace(s.find("BLOCK = 256"), 11, "BLOCK = 512");
        return s;
    }
};

} // namespace

TEST_F(LoopFixture, CompileErrorOfAnLlmCandidateReachesTheNextPromptThenItsFixIsAccepted)
{
    // Reply 1 does not compile; reply 2 is a diff that fixes the idea; reply 3 is spare.
    std::string broken = withBlock512();
    broken.replace(broken.find("sum += v * v;"), 13, "sum += v * undeclared_identifier;");
    server.enqueue(test::openAiStream(test::piecesOf("NOTE: bigger block\n```kl-candidate\n" + broken + "```\n", 64)));
    const std::string diff = unifiedDiff(templateSource, withBlock512(), "a/candidate.cu", "b/candidate.cu");
    server.enqueue(
        test::openAiStream(test::piecesOf("NOTE: bigger block, compiles\n```kl-diff\n" + diff + "```\n", 64)));
    server.enqueue(test::openAiStream({ "nothing more" }));

    auto store = newSession(3, true);
    CompilingStandInEvaluator evaluator(problem);
    auto s = settings();
    s.autoApprove = true;
    LlmAgentHooks hooks;
    hooks.record = [&](const json& j) { store->agentMessage(j); };
    LlmAgent agent(s, hooks);
    LoopOptions opt;
    opt.compileThreads = 1;
    ResearchLoop loop(*store, evaluator, agent, opt);
    const LoopResult result = loop.run();
    EXPECT_NE(result.state, "failed") << result.reason;

    const Session& session = store->session();
    std::vector<Candidate> llm;
    for (const auto& id : session.tree.order())
        if (session.tree.at(id).author == Author::Llm)
            llm.push_back(session.tree.at(id));
    ASSERT_EQ(llm.size(), 2u) << result.reason;
    EXPECT_EQ(llm[0].status, CandidateStatus::CompileFailed);
    EXPECT_EQ(llm[0].parentId, "c0001");
    EXPECT_EQ(llm[1].status, CandidateStatus::Accepted) << llm[1].statusReason;
    EXPECT_EQ(llm[1].source, withBlock512());
    EXPECT_EQ(llm[1].params.at("BLOCK"), 512);
    EXPECT_EQ(llm[1].hypothesisId, "h0001");
    ASSERT_TRUE(result.best.has_value());
    EXPECT_EQ(*result.best, llm[1].id);

    // The second request carried the compiler's complaint about the first candidate.
    const auto reqs = server.requests();
    ASSERT_GE(reqs.size(), 2u);
    const std::string second = json::parse(reqs[1].body)["messages"][1]["content"];
    EXPECT_NE(second.find(llm[0].id + " (from c0001): compile-failed"), std::string::npos) << second;
    EXPECT_NE(second.find("undeclared_identifier"), std::string::npos);

    // Everything is in the journal: prompts, replies, usage, proposals, verdicts.
    std::vector<std::string> types;
    for (const auto& e : store->events())
        if (e.kind == EventKind::AgentMessage)
            types.push_back(e.data.value("type", ""));
    auto count = [&](const char* t) { return std::count(types.begin(), types.end(), t); };
    EXPECT_GE(count("llm.request"), 2);
    EXPECT_GE(count("llm.reply"), 2);
    EXPECT_EQ(count("llm.proposal"), 2);
    EXPECT_EQ(count("llm.verdict"), 2);
    // A reopened session still has all of it.
    store.reset();
    LoadReport report;
    const Session reloaded = SessionStore::load(dir, &report);
    EXPECT_EQ(reloaded.tree.at(llm[1].id).status, CandidateStatus::Accepted);
}

TEST_F(LoopFixture, LlmProposalWaitsForTheEngineerBeforeItCostsGpuTime)
{
    server.enqueue(test::openAiStream({ "NOTE: bigger block\n```kl-candidate\n" + withBlock512() + "```\n" }));
    auto store = newSession(2, false);
    CompilingStandInEvaluator evaluator(problem);
    LlmAgentHooks hooks;
    hooks.record = [&](const json& j) { store->agentMessage(j); };
    LlmAgent agent(settings(), hooks);
    LoopOptions opt;
    opt.compileThreads = 1;
    ResearchLoop loop(*store, evaluator, agent, opt);
    LoopResult result;
    std::thread runner([&] { result = loop.run(); });

    // Wait (bounded) for the proposal to reach review; nothing of it is evaluated meanwhile.
    CandidateId pending;
    for (int i = 0; i < 500 && pending.empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        for (const auto& e : store->events())
            if (e.kind == EventKind::CandidateStatus && e.data.dump().find("pending-review") != std::string::npos)
                pending = e.candidateId;
    }
    ASSERT_FALSE(pending.empty());
    // The seed may still be on the device; the pending proposal must not get there before the review.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_FALSE(evaluator.wasEvaluated(pending));
    loop.review(pending, true, "looks right");
    runner.join();
    EXPECT_NE(result.state, "failed") << result.reason;
    EXPECT_TRUE(evaluator.wasEvaluated(pending));
    EXPECT_EQ(store->session().tree.at(pending).status, CandidateStatus::Accepted);
    EXPECT_EQ(server.requests().size(), 1u); // no second call while the first waited
}
