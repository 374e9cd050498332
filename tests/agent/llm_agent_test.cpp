// The LLM agent against the loopback server with a real session store.
#include "agent/llm/llm_agent.h"
#include "core/diff.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/live_agent_stream.h"
#include "core/session_store.h"
#include "loopback_server.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <gtest/gtest.h>
#include <thread>

namespace fs = std::filesystem;
using namespace kl;
using nlohmann::json;

namespace {

const fs::path kFixtures = fs::path(KL_SOURCE_DIR) / "tests" / "agent" / "fixtures";
constexpr const char* kKey = "sk-agent-secret-abcdef123456";

struct AgentFixture : ::testing::Test {
    test::LoopbackServer server;
    fs::path dir;
    Problem problem;
    std::unique_ptr<SessionStore> store;
    std::vector<json> records;
    std::string templateSource;

    void SetUp() override
    {
        ::setenv("KL_TEST_AGENT_KEY", kKey, 1);
        dir = fs::temp_directory_path()
            / ("kl_llm_agent_" + std::to_string(::getpid()) + "_"
                + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir);
        problem = loadProblem((kFixtures / "rmsnorm_mini").string());
        Session header;
        header.id = "llm-test";
        header.problemName = problem.name;
        header.problemFolder = problem.folder;
        header.device.name = "NVIDIA H200";
        header.device.ccMajor = 9;
        header.device.arch = "sm_90a";
        store = SessionStore::create(dir, header);
        templateSource = readFile(kFixtures / "rmsnorm_mini" / "template.cu");
        Candidate c;
        c.source = templateSource;
        c.params = { { "BLOCK", 256 } };
        c.author = Author::Human;
        const auto id = store->proposeCandidate(c).candidateId;
        store->setStatus(id, CandidateStatus::Accepted, "seed");
        store->moveHead(id, "seed");
        Hypothesis h;
        h.id = "h0001";
        h.text = "Use a 512-thread block by default";
        h.createdMs = nowMs();
        store->addHypothesis(h);
    }

    void TearDown() override
    {
        store.reset();
        fs::remove_all(dir);
    }

    LlmAgentSettings settings(llm::ApiKind api = llm::ApiKind::OpenAiChat)
    {
        LlmAgentSettings s;
        s.provider = llm::providerPreset(api == llm::ApiKind::OpenAiChat ? "openai" : "anthropic");
        s.provider.baseUrl = server.baseUrl();
        s.provider.model = "loop-model";
        s.provider.apiKeyEnv = "KL_TEST_AGENT_KEY";
        s.provider.backoffBaseMs = 5;
        s.provider.prices.models["loop-model"] = { 1.0, 4.0, 0.5 };
        s.defaultContextRoots = false;
        s.contextDirs = { kFixtures / "context" };
        return s;
    }

    LlmAgentHooks hooks()
    {
        LlmAgentHooks h;
        h.record = [this](const json& j) {
            records.push_back(j);
            store->agentMessage(j);
        };
        return h;
    }

    AgentContext context()
    {
        AgentContext ctx;
        ctx.problem = &problem;
        ctx.session = &store->session();
        ctx.branchFrom = store->session().tree.head();
        ctx.hypothesis = store->session().hypotheses.at("h0001");
        ctx.bottleneckSummary = "memory bound: 58% of DRAM peak";
        return ctx;
    }

    std::string goodCandidate() const
    {
        std::string s = templateSource;
        s.replace(s.find("BLOCK = 256"), 11, "BLOCK = 512");
        return s;
    }

    std::vector<std::string> recordTypes() const
    {
        std::vector<std::string> t;
        for (const auto& r : records)
            t.push_back(r.at("type"));
        return t;
    }
};

} // namespace

TEST_F(AgentFixture, GoodCandidateBecomesAProposalWaitingForReview)
{
    const std::string reply
        = "NOTE: 512 threads cover H=4096 in 8 iterations\n```kl-candidate\n" + goodCandidate() + "```\n";
    server.enqueue(test::openAiStream(test::piecesOf(reply, 40), 2000, 300));
    std::string live;
    auto h = hooks();
    h.onDelta = [&](const std::string& d) { live += d; };
    LlmAgent agent(settings(), h);
    EXPECT_EQ(agent.name(), "llm:openai");
    auto proposals = agent.propose(context(), {});
    ASSERT_EQ(proposals.size(), 1u);
    const Proposal& p = proposals[0];
    EXPECT_TRUE(p.needsReview);
    EXPECT_EQ(p.note, "512 threads cover H=4096 in 8 iterations");
    EXPECT_EQ(p.candidate.source, goodCandidate());
    EXPECT_EQ(p.candidate.params.at("BLOCK"), 512);
    EXPECT_EQ(p.candidate.parentId, "c0001");
    EXPECT_EQ(p.candidate.author, Author::Llm);
    EXPECT_EQ(p.candidate.agent, "llm:openai/loop-model");
    EXPECT_EQ(p.candidate.hypothesisId, "h0001");
    EXPECT_EQ(live, reply);

    // The request carried the prompt: hypothesis, current source, the device's notes, the bottleneck.
    const auto reqs = server.requests();
    ASSERT_EQ(reqs.size(), 1u);
    const json body = json::parse(reqs[0].body);
    const std::string sys = body["messages"][0]["content"];
    const std::string user = body["messages"][1]["content"];
    EXPECT_NE(sys.find("Fixture Hopper"), std::string::npos);
    EXPECT_NE(user.find("Use a 512-thread block by default"), std::string::npos);
    EXPECT_NE(user.find("// @kl:param BLOCK = 256"), std::string::npos);
    EXPECT_NE(user.find("memory bound: 58% of DRAM peak"), std::string::npos);

    EXPECT_EQ(recordTypes(), (std::vector<std::string> { "llm.request", "llm.reply", "llm.proposal" }));
    EXPECT_EQ(records[1]["usage"]["input_tokens"], 2000);
    EXPECT_NEAR(records[1]["usage"]["cost_usd"].get<double>(), (1000 * 1.0 + 1000 * 0.5 + 300 * 4.0) / 1e6, 1e-12);
    EXPECT_EQ(records[2]["form"], "candidate");
    EXPECT_EQ(agent.sessionUsage().outputTokens, 300);
    // Recorded in the session journal, and no secret anywhere in it.
    const std::string journal = readFile(dir / "journal.jsonl");
    EXPECT_NE(journal.find("llm.proposal"), std::string::npos);
    EXPECT_EQ(journal.find("abcdef123456"), std::string::npos);
}

TEST_F(AgentFixture, UnusableReplyIsAnsweredWithTheErrorThenADiffIsAccepted)
{
    std::string bad = templateSource;
    bad.replace(bad.find("BLOCK = 256 in"), 14, "BLOCK = 256 of");
    server.enqueue(test::anthropicStream(test::piecesOf("```kl-candidate\n" + bad + "```\n", 50), 1500, 400));
    const std::string diff = unifiedDiff(templateSource, goodCandidate(), "a/candidate.cu", "b/candidate.cu");
    server.enqueue(test::anthropicStream(test::piecesOf("NOTE: fixed\n```kl-diff\n" + diff + "```\n", 50), 1800, 100));
    LlmAgent agent(settings(llm::ApiKind::AnthropicMessages), hooks());
    auto proposals = agent.propose(context(), {});
    ASSERT_EQ(proposals.size(), 1u);
    EXPECT_EQ(proposals[0].candidate.source, goodCandidate());
    EXPECT_EQ(proposals[0].note, "fixed");

    const auto reqs = server.requests();
    ASSERT_EQ(reqs.size(), 2u);
    const json second = json::parse(reqs[1].body);
    ASSERT_EQ(second["messages"].size(), 3u);
    EXPECT_EQ(second["messages"][1]["role"], "assistant");
    const std::string correction = second["messages"][2]["content"];
    EXPECT_NE(correction.find("annotations are invalid"), std::string::npos) << correction;
    EXPECT_NE(correction.find("line 1"), std::string::npos) << correction;

    EXPECT_EQ(recordTypes(),
        (std::vector<std::string> {
            "llm.request", "llm.reply", "llm.reply-rejected", "llm.request", "llm.reply", "llm.proposal" }));
    EXPECT_EQ(records[2]["kind"], "bad-annotations");
    EXPECT_EQ(records[5]["form"], "diff");
    EXPECT_EQ(agent.sessionUsage().inputTokens, 3300);
    EXPECT_EQ(records[4]["session_usage"]["output_tokens"], 500);
    // The stable system prompt is journaled once; the retry names it by hash.
    EXPECT_TRUE(records[0].contains("system"));
    EXPECT_FALSE(records[3].contains("system"));
    EXPECT_EQ(records[0]["system_sha256"], records[3]["system_sha256"]);
    // Usage can be summed from the journal after a restart.
    int calls = 0;
    std::vector<Event> journal;
    SessionStore::load(dir, nullptr, &journal);
    const llm::Usage fromJournal = llmUsageFromEvents(journal, &calls);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(fromJournal.inputTokens, 3300);
    EXPECT_EQ(fromJournal.outputTokens, 500);
}

TEST_F(AgentFixture, RetriesAreBoundedAndFailuresReachTheNextPrompt)
{
    for (int i = 0; i < 3; ++i)
        server.enqueue(test::openAiStream({ "I think we should vectorize, but here is no code." }));
    auto s = settings();
    s.maxReplyAttempts = 3;
    LlmAgent agent(s, hooks());
    EXPECT_TRUE(agent.propose(context(), {}).empty());
    EXPECT_EQ(server.requests().size(), 3u);

    server.enqueue(test::openAiStream({ "NOTE: x\n```kl-candidate\n" + goodCandidate() + "```\n" }));
    ASSERT_EQ(agent.propose(context(), {}).size(), 1u);
    const json fourth = json::parse(server.requests().at(3).body);
    ASSERT_EQ(fourth["messages"].size(), 2u); // a fresh conversation
    const std::string user = fourth["messages"][1]["content"];
    EXPECT_NE(user.find("Recent failed attempts"), std::string::npos);
    EXPECT_NE(user.find("reply 3 of call 1: malformed-reply"), std::string::npos) << user;
    EXPECT_NE(user.find("no ```kl-candidate or ```kl-diff block"), std::string::npos);
}

TEST_F(AgentFixture, NoCallWhileItsProposalWaitsForReview)
{
    Candidate pending;
    pending.source = goodCandidate();
    pending.parentId = "c0001";
    pending.author = Author::Llm;
    pending.agent = "llm:openai/loop-model";
    const auto id = store->proposeCandidate(pending).candidateId;
    store->setStatus(id, CandidateStatus::PendingReview, "waits");
    LlmAgent agent(settings(), hooks());
    EXPECT_TRUE(agent.propose(context(), {}).empty());
    EXPECT_TRUE(server.requests().empty());
    EXPECT_TRUE(records.empty());
    store->setStatus(id, CandidateStatus::Rejected, "engineer said no");
    server.enqueue(test::openAiStream({ "NOTE: y\n```kl-candidate\n" + goodCandidate() + "```\n" }));
    auto s2 = settings();
    s2.autoApprove = true;
    LlmAgent agent2(s2, hooks());
    auto props = agent2.propose(context(), {});
    ASSERT_EQ(props.size(), 1u);
    EXPECT_FALSE(props[0].needsReview);
    const json body = json::parse(server.requests().at(0).body);
    EXPECT_NE(
        body["messages"][1]["content"].get<std::string>().find(id + " (from c0001): rejected"), std::string::npos);
}

TEST_F(AgentFixture, ProviderErrorsAreRecordedAndThrown)
{
    server.enqueue(test::jsonResponse(401, R"({"error":{"message":"invalid x-api-key"}})"));
    LlmAgent agent(settings(), hooks());
    EXPECT_THROW(agent.propose(context(), {}), llm::LlmError);
    ASSERT_EQ(recordTypes(), (std::vector<std::string> { "llm.request", "llm.error" }));
    EXPECT_EQ(records[1]["kind"], "auth");
    EXPECT_EQ(records[1]["message"].get<std::string>().find(kKey), std::string::npos);
}

TEST_F(AgentFixture, TunedParameterValuesOfTheBaseSurviveACodeChange)
{
    // The tuner moved the head to BLOCK=1024; the model changes code only, then redeclares BLOCK.
    Candidate tuned;
    tuned.source = templateSource;
    tuned.parentId = "c0001";
    tuned.params = { { "BLOCK", 1024 } };
    tuned.author = Author::Tuner;
    const auto id = store->proposeCandidate(tuned).candidateId;
    store->setStatus(id, CandidateStatus::Accepted, "tuned");
    store->moveHead(id, "tuned");
    std::string codeOnly = templateSource;
    codeOnly.replace(codeOnly.find("sum += v * v;"), 13, "sum = fmaf(v, v, sum);");
    server.enqueue(test::openAiStream({ "NOTE: fma\n```kl-diff\n"
        + unifiedDiff(templateSource, codeOnly, "a/candidate.cu", "b/candidate.cu") + "```\n" }));
    server.enqueue(test::openAiStream({ "NOTE: new default\n```kl-candidate\n" + goodCandidate() + "```\n" }));
    LlmAgent agent(settings(), hooks());
    auto first = agent.propose(context(), {});
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0].candidate.parentId, id);
    EXPECT_EQ(first[0].candidate.params.at("BLOCK"), 1024);
    auto second = agent.propose(context(), {});
    ASSERT_EQ(second.size(), 1u);
    EXPECT_EQ(second[0].candidate.params.at("BLOCK"), 512);
}

TEST_F(AgentFixture, ObserveRecordsTheVerdictOfItsOwnCandidates)
{
    LlmAgent agent(settings(), hooks());
    Candidate c;
    c.id = "c0007";
    c.author = Author::Llm;
    c.agent = "llm:openai/loop-model";
    c.source = goodCandidate();
    Evaluation e;
    e.verdict = Verdict::Rejected;
    e.reasons.push_back({ "static.side-stream", "creates a stream", 12, true });
    agent.observe(c, e);
    c.author = Author::Tuner;
    agent.observe(c, e);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0]["type"], "llm.verdict");
    EXPECT_EQ(records[0]["candidate"], "c0007");
    EXPECT_EQ(records[0]["reasons"][0]["rule"], "static.side-stream");
}

TEST(LlmAgentSettings, FromAgentSpecAndSessionExtras)
{
    auto s = llmAgentSettingsFor("llm:deepseek",
        { { "llm.model", "deepseek-reasoner" }, { "llm.auto_approve", "true" },
            { "llm.settings",
                R"({"read_timeout_ms": 5000, "prices": {"deepseek-*": {"input": 0.5, "output": 2}}})" } });
    EXPECT_EQ(s.provider.name, "deepseek");
    EXPECT_EQ(s.provider.model, "deepseek-reasoner");
    EXPECT_EQ(s.provider.readTimeoutMs, 5000);
    EXPECT_TRUE(s.autoApprove);
    ASSERT_TRUE(s.provider.prices.find("deepseek-reasoner"));
    EXPECT_THROW(llmAgentSettingsFor("llm:nonexistent", {}), InputError);
    EXPECT_THROW(llmAgentSettingsFor("llm:openai", { { "llm.auto_approve", "yes" } }), InputError);
    EXPECT_THROW(llmAgentSettingsFor("llm:openai", { { "llm.settings", R"({"api_key": "sk-123"})" } }), InputError);
    auto agent = makeLlmAgent(llmAgentSettingsFor("llm:ollama", { { "llm.model", "qwen" } }));
    EXPECT_EQ(agent->name(), "llm:ollama");
}

// kloop run's hooks: while the provider streams, the reply is already in <session>/live/agent-stream.jsonl, chunk
// by chunk, for a workbench in another process; the journal's request and reply records name the stream; the file
// is gone when the request ends.
TEST_F(AgentFixture, TheReplyIsInTheLiveStreamFileWhileItStreams)
{
    const std::string reply = "NOTE: wider block\n```kl-candidate\n" + goodCandidate() + "```\n";
    const auto pieces = test::piecesOf(reply, 64);
    ASSERT_GT(pieces.size(), 4u);
    server.enqueue(test::openAiStream(pieces, 2000, 300, 40));
    LiveStreamWriter writer(dir);
    LlmAgent agent(settings(), liveStreamingHooks(hooks().record, [&writer]() { return &writer; }));

    LiveStreamReader reader(dir);
    std::atomic<bool> done { false };
    std::vector<LiveStreamRecord> seen;
    std::size_t deltasWhileStreaming = 0;
    std::thread workbench([&]() {
        while (!done) {
            for (auto& r : reader.poll()) {
                if (r.kind == LiveStreamRecord::Kind::Delta && !done)
                    ++deltasWhileStreaming;
                seen.push_back(std::move(r));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        for (auto& r : reader.poll())
            seen.push_back(std::move(r));
    });
    const auto proposals = agent.propose(context(), {});
    done = true;
    workbench.join();
    ASSERT_EQ(proposals.size(), 1u);

    EXPECT_GT(deltasWhileStreaming, pieces.size() / 2); // read live, not after the fact
    ASSERT_GE(seen.size(), pieces.size() + 2);
    EXPECT_EQ(seen.front().kind, LiveStreamRecord::Kind::Begin);
    EXPECT_EQ(seen.front().model, "loop-model");
    EXPECT_EQ(seen.back().kind, LiveStreamRecord::Kind::End);
    std::string text;
    for (const auto& r : seen)
        if (r.kind == LiveStreamRecord::Kind::Delta) {
            EXPECT_EQ(r.offset, text.size());
            text += r.text;
        }
    EXPECT_EQ(text, reply);
    EXPECT_FALSE(fs::exists(liveAgentStreamPath(dir)));
    // The journal names the stream in the request and the reply, so the workbench can match them.
    std::string requestStream, replyStream;
    for (const auto& r : records) {
        if (r.at("type") == "llm.request")
            requestStream = r.value("live_stream", "");
        if (r.at("type") == "llm.reply")
            replyStream = r.value("live_stream", "");
    }
    EXPECT_EQ(requestStream, seen.front().stream);
    EXPECT_EQ(replyStream, seen.front().stream);
}
