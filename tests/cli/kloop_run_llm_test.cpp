// `kloop run --agent llm:<provider>` as a process, end to end, in CI: the real binary, the real LLM agent
// against a real HTTP server on loopback (tests/agent/loopback_server.h) with scripted replies, real
// NVRTC compiles, and kl_test_fake_worker, the protocol-level test double of kloop-worker (see
// fake_gpu_worker.cpp for its verify and timing rules), in place of the GPU. Assertions are on the session
// kloop writes.
#include "agent/llm/llm_agent.h"
#include "core/diff.h"
#include "core/gpu_run_lock.h"
#include "core/json_io.h"
#include "core/live_agent_stream.h"
#include "core/profile_summary.h"
#include "core/session_inbox.h"
#include "core/session_store.h"
#include "loopback_server.h"
#include "tests/support/kloop_process.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace fs = std::filesystem;
using namespace kl;
using nlohmann::json;

namespace {

using namespace kl::clitest;

constexpr const char* kApiKey = "sk-kl-test-7f3a9c1e-never-journal-me";

// Every file under dir that contains needle, as a list for the failure message.
std::string filesContaining(const fs::path& dir, const std::string& needle)
{
    std::string hits;
    for (const auto& entry : fs::recursive_directory_iterator(dir))
        if (entry.is_regular_file() && kl::test::readTextFile(entry.path()).find(needle) != std::string::npos)
            hits += entry.path().string() + " ";
    return hits;
}

std::string replaceOnce(std::string s, const std::string& from, const std::string& to)
{
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << "the template no longer contains: " << from;
    if (at != std::string::npos)
        s.replace(at, from.size(), to);
    return s;
}

struct KloopRunLlm : ::testing::Test {
    test::LoopbackServer server;
    fs::path scratch;
    fs::path sessionDir;
    std::string templateSource;

    void SetUp() override
    {
        scratch = fs::temp_directory_path()
            / ("kl_kloop_run_llm_" + std::to_string(::getpid()) + "_"
                + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(scratch);
        fs::create_directories(scratch / "home");
        sessionDir = scratch / "session";
        templateSource = readFile(fs::path(KL_SOURCE_DIR) / "kernels" / "problems" / "rmsnorm" / "template.cu");
    }
    void TearDown() override
    {
        if (!HasFailure() && !std::getenv("KL_TEST_KEEP"))
            fs::remove_all(scratch);
    }

    // Nothing from the user's machine (caches, context, tuning database) reaches the run.
    std::map<std::string, std::string> environment(const std::string& keyVariable) const
    {
        return { { "KL_WORKER", KL_FAKE_WORKER_PATH }, { "HOME", (scratch / "home").string() },
            { "XDG_CACHE_HOME", (scratch / "cache").string() }, { "XDG_CONFIG_HOME", (scratch / "config").string() },
            { "KL_CACHE_DIR", (scratch / "cache").string() }, { "KL_CONTEXT_DIRS", "" }, { "KL_PROBLEMS_DIR", "" },
            { "KL_DATA_DIR", "" }, { "OPENAI_API_KEY", keyVariable == "OPENAI_API_KEY" ? kApiKey : "" },
            { "ANTHROPIC_API_KEY", keyVariable == "ANTHROPIC_API_KEY" ? kApiKey : "" }, { "VLLM_API_KEY", "" } };
    }

    std::vector<std::string> runArgs(const std::string& provider, int budget, bool autoApprove = true) const
    {
        std::vector<std::string> args { "run", "--problem", "rmsnorm", "--agent", "llm:" + provider, "--llm-base-url",
            server.baseUrl(), "--llm-model", "scripted-model", "--session", sessionDir.string(), "--budget",
            std::to_string(budget), "--no-tuning-db", "--compile-threads", "2", "--seed", "7", "--json" };
        if (autoApprove)
            args.push_back("--auto-approve");
        return args;
    }

    // The good idea: 512 threads per row (the double times it by its efficiency marker, which beats any
    // hash-derived efficiency of the template).
    std::string fasterKernel() const
    {
        return replaceOnce(templateSource, "// @kl:param THREADS = 256 in",
            "// kl-test-double: efficiency=0.90\n// @kl:param THREADS = 512 in");
    }
    std::string nonCompilingKernel() const
    {
        return replaceOnce(templateSource, "rsqrtf(__fdividef(ss, (float)H) + eps)",
            "rsqrtf(__fdividef(ss, (float)H) + undeclared_identifier)");
    }
    // Really wrong (drops the mean) and marked, so the double's verification fails it.
    std::string wrongKernel() const
    {
        return replaceOnce(replaceOnce(templateSource, "rsqrtf(__fdividef(ss, (float)H) + eps)", "rsqrtf(ss + eps)"),
            "// @kl:param THREADS", "// kl-test-double: wrong-results\n// @kl:param THREADS");
    }

    json summaryOf(const ProcessResult& r) const
    {
        std::istringstream lines(r.out);
        std::string line, last;
        while (std::getline(lines, line))
            if (!line.empty())
                last = line;
        try {
            const json j = json::parse(last);
            return j.value("summary", json::object());
        } catch (const json::exception&) {
            ADD_FAILURE() << "no JSON summary line in kloop's output:\n" << r.out;
            return json::object();
        }
    }
};

// The next candidate that kloop reports (on its --json event stream) as waiting for review, other than those in
// seen; empty after the deadline or when kloop has printed its summary.
CandidateId nextPendingReview(const KloopProcess& kloop, const std::vector<CandidateId>& seen)
{
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
        const std::string out = kloop.out();
        std::size_t begin = 0;
        for (std::size_t nl = out.find('\n'); nl != std::string::npos; begin = nl + 1, nl = out.find('\n', begin)) {
            json e;
            try {
                e = json::parse(out.substr(begin, nl - begin));
            } catch (const json::exception&) {
                continue;
            }
            if (e.contains("summary"))
                return {};
            const std::string id = e.value("candidate", "");
            if (e.value("kind", "") == "candidate-status" && e["data"].value("status", "") == "pending-review"
                && std::find(seen.begin(), seen.end(), id) == seen.end())
                return id;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {};
}

std::vector<json> agentRecords(const std::vector<Event>& events, const std::string& type)
{
    std::vector<json> out;
    for (const auto& e : events)
        if (e.kind == EventKind::AgentMessage && e.data.value("type", "") == type)
            out.push_back(e.data);
    return out;
}

std::vector<CandidateId> llmCandidates(const Session& s)
{
    std::vector<CandidateId> out;
    for (const auto& id : s.tree.order())
        if (s.tree.at(id).author == Author::Llm)
            out.push_back(id);
    return out;
}

bool hasRule(const Evaluation& e, const std::string& rule)
{
    return std::any_of(e.reasons.begin(), e.reasons.end(), [&](const VerdictReason& r) { return r.rule == rule; });
}

} // namespace

// Profiles reach the agent on their own: the loop profiles each new best with the worker's speed-of-light op (the
// test double models it) and the next prompt carries the summary, the same text the workbench's panel shows.
TEST_F(KloopRunLlm, TheProfileOfTheNewBestIsInTheNextPrompt)
{
    const std::string good = "NOTE: 512 threads per row\n```kl-diff\n"
        + unifiedDiff(templateSource, fasterKernel(), "a/candidate.cu", "b/candidate.cu") + "```\n";
    server.enqueue(test::openAiStream(test::piecesOf(good, 64), 1000, 100));
    for (int i = 0; i < 8; ++i)
        server.enqueue(test::openAiStream({ "I have no further idea." }, 10, 5));
    // baseline + template + the good candidate + one more call
    const ProcessResult r = runKloop(runArgs("openai", 4), environment("OPENAI_API_KEY"), scratch);
    ASSERT_EQ(r.exitCode, 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;

    auto store = SessionStore::open(sessionDir);
    const Session& s = store->session();
    const std::vector<CandidateId> llm = llmCandidates(s);
    ASSERT_EQ(llm.size(), 1u) << r.err;
    ASSERT_EQ(s.tree.at(llm[0]).status, CandidateStatus::Accepted) << s.tree.at(llm[0]).statusReason;
    // Each best was profiled and journaled: the template, then the LLM's candidate.
    const CandidateId templateId = s.tree.order().at(1);
    EXPECT_TRUE(s.profiles.count(templateId));
    ASSERT_TRUE(s.profiles.count(llm[0]));
    const CandidateProfile& profile = s.profiles.at(llm[0]);
    ASSERT_FALSE(profile.kernels.empty());
    const ProfiledKernel& k = profile.kernels.front();
    EXPECT_EQ(k.name, "rmsnorm_template");
    EXPECT_GT(k.dramPct, 40.0) << "the double's efficiency marker 0.90 gives ~90% of its bandwidth";
    EXPECT_EQ(k.smPct, 25.0);
    EXPECT_GT(k.occupancyPct, 0.0);
    EXPECT_GT(profile.baselineUs, profile.candidateUs);
    const std::string summary = bottleneckSummary(profile);
    EXPECT_NE(summary.find("DRAM"), std::string::npos) << summary;
    EXPECT_NE(summary.find("SM 25.0%"), std::string::npos) << summary;
    EXPECT_NE(summary.find("achieved occupancy"), std::string::npos) << summary;
    EXPECT_NE(summary.find("Bound: memory-bound"), std::string::npos) << summary;
    EXPECT_NE(summary.find("What limits it"), std::string::npos) << summary;

    auto promptOf = [](const test::RecordedRequest& req) {
        std::string text;
        const json body = json::parse(req.body);
        for (const auto& m : body.at("messages"))
            text += m.value("content", "") + "\n";
        return text;
    };
    const auto reqs = server.requests();
    ASSERT_GE(reqs.size(), 2u);
    // The first prompt goes out before anything was measured; the second, after the good candidate became the best,
    // carries its profile, word for word.
    EXPECT_EQ(promptOf(reqs[0]).find("Profiler bottleneck summary"), std::string::npos);
    const std::string second = promptOf(reqs[1]);
    EXPECT_NE(second.find("Profiler bottleneck summary"), std::string::npos) << second;
    const std::string text = summary.substr(0, summary.find_last_not_of('\n') + 1);
    EXPECT_NE(second.find(text), std::string::npos) << "summary:\n" << summary << "\nprompt:\n" << second;
}

TEST_F(KloopRunLlm, OpenAiRepliesBecomeCandidatesCompiledVerifiedTimedAndRecorded)
{
    // Call 1: an unusable reply (no block), then the good idea as a diff. Call 2: a candidate that does not
    // compile. Call 3: one that compiles and computes the wrong thing. Spare replies say nothing usable.
    const std::string malformed = "More threads per row should help; I would raise THREADS to 512.";
    const std::string good = "NOTE: 512 threads per row\n```kl-diff\n"
        + unifiedDiff(templateSource, fasterKernel(), "a/candidate.cu", "b/candidate.cu") + "```\n";
    const std::string broken = "NOTE: squares with a new helper\n```kl-candidate\n" + nonCompilingKernel() + "```\n";
    const std::string wrong = "NOTE: skip the division by H\n```kl-candidate\n" + wrongKernel() + "```\n";
    server.enqueue(test::openAiStream(test::piecesOf(malformed, 20), 1000, 30));
    server.enqueue(test::openAiStream(test::piecesOf(good, 64), 1100, 400));
    server.enqueue(test::openAiStream(test::piecesOf(broken, 64), 1200, 2000));
    server.enqueue(test::openAiStream(test::piecesOf(wrong, 64), 1300, 2100));
    for (int i = 0; i < 6; ++i)
        server.enqueue(test::openAiStream({ "I have no further idea." }, 10, 5));

    const auto started = std::chrono::steady_clock::now();
    // baseline + template + three LLM candidates
    const ProcessResult r = runKloop(runArgs("openai", 5), environment("OPENAI_API_KEY"), scratch);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    ASSERT_EQ(r.exitCode, 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;
    const json summary = summaryOf(r);

    auto store = SessionStore::open(sessionDir);
    const Session& s = store->session();
    EXPECT_EQ(s.device.name, "test double (no GPU)");
    EXPECT_EQ(s.settings.agent, "llm:openai");
    EXPECT_TRUE(s.settings.autoApproveLlm);

    // The template (real NVRTC compile: real register counts) is accepted over the naive baseline.
    const std::vector<CandidateId> order = s.tree.order();
    ASSERT_GE(order.size(), 2u);
    const CandidateId templateId = order[1];
    ASSERT_TRUE(s.evaluations.count(templateId));
    const Evaluation& templateEval = s.evaluations.at(templateId);
    ASSERT_FALSE(templateEval.compile.kernels.empty());
    EXPECT_GT(templateEval.compile.kernels[0].registers, 0);
    EXPECT_EQ(s.tree.at(templateId).status, CandidateStatus::Accepted) << s.tree.at(templateId).statusReason;

    const std::vector<CandidateId> llm = llmCandidates(s);
    ASSERT_EQ(llm.size(), 3u) << r.out << r.err;

    // The good candidate: applied from the diff, parented on the template, accepted as the new best.
    const Candidate& faster = s.tree.at(llm[0]);
    EXPECT_EQ(faster.source, fasterKernel());
    EXPECT_EQ(faster.params.at("THREADS"), 512);
    EXPECT_EQ(faster.parentId, templateId);
    EXPECT_EQ(faster.agent, "llm:openai/scripted-model");
    EXPECT_EQ(faster.status, CandidateStatus::Accepted) << faster.statusReason;
    ASSERT_TRUE(s.evaluations.count(llm[0]));
    EXPECT_GT(s.evaluations.at(llm[0]).objective, templateEval.objective);
    EXPECT_EQ(summary.value("best", ""), llm[0]);

    // The non-compiling one: a recorded failed attempt with NVRTC's own error.
    const Candidate& nonCompiling = s.tree.at(llm[1]);
    EXPECT_EQ(nonCompiling.status, CandidateStatus::CompileFailed);
    ASSERT_TRUE(s.evaluations.count(llm[1]));
    EXPECT_FALSE(s.evaluations.at(llm[1]).compile.ok);
    EXPECT_NE(s.evaluations.at(llm[1]).compile.log.find("undeclared_identifier"), std::string::npos)
        << s.evaluations.at(llm[1]).compile.log;

    // The wrong one: compiled, verified by the worker, rejected with the correctness rule.
    const Candidate& wrongResults = s.tree.at(llm[2]);
    EXPECT_EQ(wrongResults.status, CandidateStatus::Rejected);
    ASSERT_TRUE(s.evaluations.count(llm[2]));
    EXPECT_TRUE(s.evaluations.at(llm[2]).compile.ok);
    EXPECT_TRUE(hasRule(s.evaluations.at(llm[2]), "correctness.rel-l2"));

    // Prompts and replies are in the journal, and each proposal names the source it carried.
    const std::vector<Event> events = store->events();
    const auto requests = agentRecords(events, "llm.request");
    const auto replies = agentRecords(events, "llm.reply");
    ASSERT_GE(requests.size(), 4u);
    ASSERT_GE(replies.size(), 4u);
    EXPECT_EQ(requests[0].value("model", ""), "scripted-model");
    EXPECT_TRUE(requests[0].contains("system"));
    const std::string firstPrompt = requests[0]["messages"][0].value("content", "");
    EXPECT_NE(firstPrompt.find("rmsnorm"), std::string::npos);
    EXPECT_EQ(replies[0].value("text", ""), malformed);
    EXPECT_EQ(replies[1].value("text", ""), good);
    EXPECT_EQ(replies[2].value("text", ""), broken);
    EXPECT_EQ(replies[3].value("text", ""), wrong);
    const auto proposals = agentRecords(events, "llm.proposal");
    ASSERT_EQ(proposals.size(), 3u);
    EXPECT_EQ(proposals[0].value("form", ""), "diff");
    EXPECT_EQ(proposals[0].value("source_sha256", ""), sha256Hex(faster.source));
    EXPECT_EQ(proposals[1].value("source_sha256", ""), sha256Hex(nonCompiling.source));
    for (const auto& p : proposals)
        EXPECT_FALSE(p.value("needs_review", true)) << "--auto-approve: no proposal waits for review";
    // Each reply also streamed through <session>/live/ for the workbench: a request and its reply name the same
    // stream, every reply its own, and nothing is left in live/ after the run.
    std::set<std::string> streams;
    for (std::size_t i = 0; i < std::min(requests.size(), replies.size()); ++i) {
        EXPECT_FALSE(requests[i].value("live_stream", "").empty());
        EXPECT_EQ(replies[i].value("live_stream", ""), requests[i].value("live_stream", ""));
        streams.insert(requests[i].value("live_stream", ""));
    }
    EXPECT_EQ(streams.size(), std::min(requests.size(), replies.size()));
    EXPECT_FALSE(fs::exists(liveAgentStreamPath(sessionDir)));

    // The unusable reply is a recorded failed attempt with its error, and the model was told.
    const auto rejected = agentRecords(events, "llm.reply-rejected");
    ASSERT_EQ(rejected.size(), 1u);
    EXPECT_FALSE(rejected[0].value("message", "").empty());
    const auto reqs = server.requests();
    ASSERT_GE(reqs.size(), 4u);
    const json secondBody = json::parse(reqs[1].body);
    EXPECT_NE(secondBody["messages"].back().value("content", "").find("could not be used"), std::string::npos);
    // The request after the compile failure carried the compiler's complaint.
    const std::string fourth = json::parse(reqs[3].body)["messages"][1].value("content", "");
    EXPECT_NE(fourth.find("undeclared_identifier"), std::string::npos) << fourth;

    // Verdicts reach the agent's record.
    const auto verdicts = agentRecords(events, "llm.verdict");
    ASSERT_EQ(verdicts.size(), 3u);
    EXPECT_EQ(verdicts[1].value("verdict", ""), verdictName(Verdict::CompileFailed));

    // Token usage per call and for the session.
    int calls = 0;
    const llm::Usage usage = llmUsageFromEvents(events, &calls);
    EXPECT_EQ(calls, static_cast<int>(replies.size()));
    EXPECT_EQ(usage.inputTokens, 1000 + 1100 + 1200 + 1300 + 10 * (static_cast<int>(replies.size()) - 4));
    EXPECT_EQ(usage.outputTokens, 30 + 400 + 2000 + 2100 + 5 * (static_cast<int>(replies.size()) - 4));
    EXPECT_EQ(replies[1]["usage"].value("input_tokens", 0), 1100);

    // The key went to the server and nowhere else.
    EXPECT_EQ(reqs[0].headers.count("authorization") ? reqs[0].headers.at("authorization") : "",
        std::string("Bearer ") + kApiKey);
    EXPECT_EQ(filesContaining(sessionDir, kApiKey), "");
    EXPECT_EQ(r.out.find(kApiKey), std::string::npos);
    EXPECT_EQ(r.err.find(kApiKey), std::string::npos);

    // kloop session show reads the same session back.
    const ProcessResult shown = runKloop({ "session", "show", sessionDir.string(), "--json" }, {}, scratch);
    ASSERT_EQ(shown.exitCode, 0) << shown.err;
    const json view = json::parse(shown.out);
    EXPECT_EQ(view.value("best", ""), llm[0]);
    std::map<std::string, json> byId;
    for (const auto& c : view.at("candidates"))
        byId[c.value("id", "")] = c;
    ASSERT_TRUE(byId.count(llm[1]));
    EXPECT_EQ(byId[llm[1]].value("author", ""), "llm");
    EXPECT_EQ(byId[llm[1]].value("status", ""), "compile-failed");

    std::printf("kloop run (openai, 5 evaluations) took %.1f s\n", seconds);
}

TEST_F(KloopRunLlm, AnthropicRepliesDriveTheLoopAndAnEqualCandidateIsNotSignificant)
{
    // Call 1: the good idea as a whole candidate. Call 2: the same speed in other code, which the loop must
    // not accept (its speedup interval includes 1.0).
    const std::string sameSpeed = replaceOnce(fasterKernel(), "// @kl:param MINB = 1 in", "// @kl:param MINB = 2 in");
    const std::string good = "NOTE: 512 threads per row\n```kl-candidate\n" + fasterKernel() + "```\n";
    const std::string equal = "NOTE: two blocks per SM\n```kl-candidate\n" + sameSpeed + "```\n";
    server.enqueue(test::anthropicStream(test::piecesOf(good, 50), 900, 700));
    server.enqueue(test::anthropicStream(test::piecesOf(equal, 50), 950, 720));
    for (int i = 0; i < 6; ++i)
        server.enqueue(test::anthropicStream({ "Nothing more to try." }, 10, 5));

    const ProcessResult r = runKloop(runArgs("anthropic", 4), environment("ANTHROPIC_API_KEY"), scratch);
    ASSERT_EQ(r.exitCode, 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;

    auto store = SessionStore::open(sessionDir);
    const Session& s = store->session();
    const std::vector<CandidateId> llm = llmCandidates(s);
    ASSERT_EQ(llm.size(), 2u) << r.out << r.err;
    EXPECT_EQ(s.tree.at(llm[0]).status, CandidateStatus::Accepted) << s.tree.at(llm[0]).statusReason;
    EXPECT_EQ(s.tree.at(llm[0]).agent, "llm:anthropic/scripted-model");
    EXPECT_EQ(s.tree.at(llm[1]).status, CandidateStatus::Rejected);
    EXPECT_EQ(s.tree.at(llm[1]).params.at("MINB"), 2);
    ASSERT_TRUE(s.evaluations.count(llm[1]));
    EXPECT_TRUE(s.evaluations.at(llm[1]).correctEverywhere());
    EXPECT_TRUE(hasRule(s.evaluations.at(llm[1]), "decide.not-significant"));
    EXPECT_EQ(summaryOf(r).value("best", ""), llm[0]);

    const std::vector<Event> events = store->events();
    const auto replies = agentRecords(events, "llm.reply");
    ASSERT_GE(replies.size(), 2u);
    EXPECT_EQ(replies[0].value("text", ""), good);
    EXPECT_EQ(replies[0]["usage"].value("input_tokens", 0), 900);
    EXPECT_EQ(replies[0]["usage"].value("output_tokens", 0), 700);

    const auto reqs = server.requests();
    ASSERT_GE(reqs.size(), 2u);
    EXPECT_EQ(reqs[0].path, "/v1/messages");
    EXPECT_EQ(reqs[0].headers.count("x-api-key") ? reqs[0].headers.at("x-api-key") : "", kApiKey);
    EXPECT_EQ(filesContaining(sessionDir, kApiKey), "");
    EXPECT_EQ(r.out.find(kApiKey), std::string::npos);
    EXPECT_EQ(r.err.find(kApiKey), std::string::npos);
}

TEST_F(KloopRunLlm, ARejectedKeyFailsTheRunWithAClearMessage)
{
    server.enqueue(test::jsonResponse(401,
        R"({"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}})"));
    const ProcessResult r = runKloop(runArgs("openai", 5), environment("OPENAI_API_KEY"), scratch);
    EXPECT_NE(r.exitCode, 0) << r.out << r.err;
    EXPECT_NE(r.exitCode, -1) << r.out << r.err;
    // On stderr: what failed, the server's words, and which variable holds the key.
    EXPECT_NE(r.err.find("authentication failed"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("OPENAI_API_KEY"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Incorrect API key provided"), std::string::npos) << r.err;
    EXPECT_EQ(summaryOf(r).value("state", ""), "failed");
    EXPECT_EQ((r.out + r.err).find(kApiKey), std::string::npos);
    EXPECT_EQ(server.requests().size(), 1u); // 401 is not retried

    // What was recorded before the failure is loadable, with the error and without the key.
    auto store = SessionStore::open(sessionDir);
    const auto errors = agentRecords(store->events(), "llm.error");
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].value("http_status", 0), 401);
    EXPECT_EQ(filesContaining(sessionDir, kApiKey), "");
}

TEST_F(KloopRunLlm, WithoutAutoApproveProposalsWaitForTheEngineersReviewThroughTheInbox)
{
    // Call 1: the good idea, which the engineer approves. Call 2: the same speed in other code, which the
    // engineer rejects before it costs any GPU time. Then the model has nothing more and the run finishes.
    const std::string good = "NOTE: 512 threads per row\n```kl-candidate\n" + fasterKernel() + "```\n";
    const std::string other = "NOTE: two blocks per SM\n```kl-candidate\n"
        + replaceOnce(fasterKernel(), "// @kl:param MINB = 1 in", "// @kl:param MINB = 2 in") + "```\n";
    server.enqueue(test::openAiStream(test::piecesOf(good, 64), 800, 600));
    server.enqueue(test::openAiStream(test::piecesOf(other, 64), 850, 610));
    for (int i = 0; i < 6; ++i)
        server.enqueue(test::openAiStream({ "I have no further idea." }, 10, 5));

    // vllm: a local OpenAI-compatible server that needs no key.
    KloopProcess kloop(runArgs("vllm", 10, false), environment(""), scratch);
    const CandidateId first = nextPendingReview(kloop, {});
    ASSERT_FALSE(first.empty()) << kloop.out();
    postInboxRequest(sessionDir, { InboxRequest::Kind::Review, first, true, "512 threads: worth timing" });
    const CandidateId second = nextPendingReview(kloop, { first });
    ASSERT_FALSE(second.empty()) << kloop.out();
    postInboxRequest(sessionDir, { InboxRequest::Kind::Review, second, false, "the same idea again" });
    const ProcessResult r = kloop.wait();
    ASSERT_EQ(r.exitCode, 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;
    EXPECT_NE(r.err.find("wait for the engineer's review"), std::string::npos) << r.err;
    // Each pending review is announced on the terminal, with where to decide it (QA Part 1: the run went silent).
    EXPECT_NE(r.err.find(first + " waits for your review"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(second + " waits for your review"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("kernelloop --session " + sessionDir.string()), std::string::npos) << r.err;
    EXPECT_EQ(summaryOf(r).value("reason", ""), "the agent has nothing left to propose");

    auto store = SessionStore::open(sessionDir);
    const Session& s = store->session();
    EXPECT_FALSE(s.settings.autoApproveLlm);
    EXPECT_EQ(llmCandidates(s), (std::vector<CandidateId> { first, second }));
    EXPECT_EQ(s.tree.at(first).status, CandidateStatus::Accepted) << s.tree.at(first).statusReason;
    EXPECT_TRUE(s.evaluations.count(first));
    EXPECT_EQ(s.tree.at(second).status, CandidateStatus::Rejected);
    EXPECT_NE(s.tree.at(second).statusReason.find("the same idea again"), std::string::npos);
    EXPECT_FALSE(s.evaluations.count(second)) << "a rejected proposal is never compiled or timed";
    ASSERT_EQ(s.reviews.size(), 2u);
    EXPECT_EQ(s.reviews[0].candidateId, first);
    EXPECT_TRUE(s.reviews[0].approved);
    EXPECT_EQ(s.reviews[1].candidateId, second);
    EXPECT_FALSE(s.reviews[1].approved);
    for (const auto& p : agentRecords(store->events(), "llm.proposal"))
        EXPECT_TRUE(p.value("needs_review", false));
}

// The referee sends a measurement to review (here a thermal slowdown while timing); the run ends with it pending.
// The engineer decides from a shell with `kloop session review`; the resumed run applies the decision before its first
// proposal, so the approved candidate is the best the tuner then searches around.
TEST_F(KloopRunLlm, AReviewDecidedBetweenRunsFromTheShellCountsFromTheResumedRunsFirstProposal)
{
    const std::string hot = replaceOnce(fasterKernel(), "// kl-test-double: efficiency=0.90",
        "// kl-test-double: efficiency=0.90\n// kl-test-double: throttle=32");
    server.enqueue(test::openAiStream(
        test::piecesOf("NOTE: 512 threads per row\n```kl-candidate\n" + hot + "```\n", 64), 800, 600));
    for (int i = 0; i < 6; ++i)
        server.enqueue(test::openAiStream({ "I have no further idea." }, 10, 5));
    const ProcessResult first = runKloop(runArgs("vllm", 3), environment(""), scratch);
    ASSERT_EQ(first.exitCode, 0) << first.out << first.err;
    CandidateId id;
    {
        const Session s = SessionStore::load(sessionDir);
        const std::vector<CandidateId> llm = llmCandidates(s);
        ASSERT_EQ(llm.size(), 1u) << first.out;
        id = llm[0];
        ASSERT_EQ(s.tree.at(id).status, CandidateStatus::PendingReview) << s.tree.at(id).statusReason;
        EXPECT_TRUE(hasRule(s.evaluations.at(id), "measurement.throttled"));
    }

    const ProcessResult wrong
        = runKloop({ "session", "review", sessionDir.string(), "c9999", "--approve" }, environment(""), scratch);
    EXPECT_EQ(wrong.exitCode, 1);
    EXPECT_NE(wrong.err.find("no candidate 'c9999'"), std::string::npos) << wrong.err;
    EXPECT_EQ(runKloop({ "session", "review", sessionDir.string(), id }, environment(""), scratch).exitCode, 2)
        << "--approve or --reject is required";
    const ProcessResult posted = runKloop({ "session", "review", sessionDir.string(), id, "--approve", "--note",
                                              "reran it on a cool GPU: the same speed" },
        environment(""), scratch);
    ASSERT_EQ(posted.exitCode, 0) << posted.err;
    EXPECT_NE(posted.out.find("kloop run --resume"), std::string::npos) << posted.out;
    EXPECT_EQ(SessionStore::load(sessionDir).tree.at(id).status, CandidateStatus::PendingReview)
        << "only the session's writer applies the decision";

    const ProcessResult resumed
        = runKloop({ "run", "--resume", sessionDir.string(), "--agent", "tuner:random", "--budget", "6", "--json" },
            environment(""), scratch);
    ASSERT_EQ(resumed.exitCode, 0) << resumed.out << resumed.err;
    const Session s = SessionStore::load(sessionDir);
    EXPECT_EQ(s.tree.at(id).status, CandidateStatus::Accepted) << s.tree.at(id).statusReason;
    ASSERT_EQ(s.reviews.size(), 1u);
    EXPECT_TRUE(s.reviews[0].approved);
    EXPECT_EQ(s.reviews[0].reason, "reran it on a cool GPU: the same speed");
    std::vector<CandidateId> tuned;
    for (const auto& c : s.tree.order())
        if (s.tree.at(c).author == Author::Tuner)
            tuned.push_back(c);
    ASSERT_FALSE(tuned.empty()) << resumed.out;
    EXPECT_EQ(s.tree.at(tuned[0]).parentId, id) << "the tuner starts from the approved best";
}

// kloop run --hypothesis: the engineer's idea is in the session, human-authored, before the first prompt, which
// carries it word for word; the candidate the model proposes under it is linked to it. vllm: a keyless preset.
TEST_F(KloopRunLlm, AHypothesisGivenToRunIsRecordedBeforeTheFirstPromptWhichCarriesIt)
{
    const std::string idea = "raise the threads per row to 512 so each row's reduction has more lanes";
    server.enqueue(test::openAiStream(
        test::piecesOf("NOTE: 512 threads per row\n```kl-candidate\n" + fasterKernel() + "```\n", 64), 900, 300));
    for (int i = 0; i < 4; ++i)
        server.enqueue(test::openAiStream({ "I have no further idea." }, 10, 5));
    std::vector<std::string> args = runArgs("vllm", 3);
    args.insert(args.end(), { "--hypothesis", idea });
    const ProcessResult r = runKloop(args, environment(""), scratch);
    ASSERT_EQ(r.exitCode, 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;

    auto store = SessionStore::open(sessionDir);
    const Session& s = store->session();
    ASSERT_EQ(s.hypotheses.size(), 1u);
    const Hypothesis& h = s.hypotheses.begin()->second;
    EXPECT_EQ(h.text, idea);
    EXPECT_EQ(h.author, Author::Human);

    const std::vector<Event> events = store->events();
    const auto firstOf = [&](auto&& pred) { return std::find_if(events.begin(), events.end(), pred) - events.begin(); };
    const auto added = firstOf([](const Event& e) { return e.kind == EventKind::HypothesisAdded; });
    const auto asked = firstOf(
        [](const Event& e) { return e.kind == EventKind::AgentMessage && e.data.value("type", "") == "llm.request"; });
    ASSERT_LT(asked, static_cast<std::ptrdiff_t>(events.size())) << "the model was never asked";
    EXPECT_LT(added, asked) << "the hypothesis is recorded before the first prompt";
    EXPECT_EQ(agentRecords(events, "llm.request").front().value("hypothesis", ""), h.id);

    const auto reqs = server.requests();
    ASSERT_FALSE(reqs.empty());
    const std::string prompt = json::parse(reqs[0].body).at("messages").dump();
    EXPECT_NE(prompt.find(idea), std::string::npos) << prompt;
    EXPECT_NE(prompt.find("from the engineer"), std::string::npos) << prompt;

    const std::vector<CandidateId> llm = llmCandidates(s);
    ASSERT_EQ(llm.size(), 1u) << r.err;
    EXPECT_EQ(s.tree.at(llm[0]).hypothesisId, h.id);
    EXPECT_EQ(s.tree.at(llm[0]).status, CandidateStatus::Accepted) << s.tree.at(llm[0]).statusReason;
}

TEST_F(KloopRunLlm, AnEmptyHypothesisIsAUsageErrorBeforeAnythingIsCreated)
{
    std::vector<std::string> args = runArgs("vllm", 3);
    args.insert(args.end(), { "--hypothesis", "  " });
    const ProcessResult r = runKloop(args, environment(""), scratch);
    EXPECT_EQ(r.exitCode, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("--hypothesis needs a text"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(sessionDir));
    EXPECT_TRUE(server.requests().empty());
}

TEST_F(KloopRunLlm, AMissingKeyFailsBeforeAnyRequest)
{
    const ProcessResult r = runKloop(runArgs("anthropic", 5), environment(""), scratch);
    EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("needs an API key"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ANTHROPIC_API_KEY"), std::string::npos) << r.err;
    EXPECT_TRUE(server.requests().empty());
}

// QA rows 201 and 203: the hint named --model (ignored, so following it gave the same error), and the error came
// only after the baseline and the template were measured.
TEST_F(KloopRunLlm, AMissingModelFailsBeforeAnythingIsMeasuredAndNamesTheRealFlag)
{
    std::vector<std::string> args = runArgs("openai", 3);
    const auto model = std::find(args.begin(), args.end(), "--llm-model");
    ASSERT_NE(model, args.end());
    args.erase(model, model + 2);
    const ProcessResult r = runKloop(args, environment("OPENAI_API_KEY"), scratch);
    EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("has no model set"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--llm-model NAME"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--model NAME"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(sessionDir)) << "nothing is created or measured before the check";
    EXPECT_TRUE(server.requests().empty());

    args.insert(args.end(), { "--model", "gpt-4o" });
    const ProcessResult wrongFlag = runKloop(args, environment("OPENAI_API_KEY"), scratch);
    EXPECT_EQ(wrongFlag.exitCode, 2) << wrongFlag.err;
    EXPECT_NE(wrongFlag.err.find("unknown option --model"), std::string::npos) << wrongFlag.err;
    EXPECT_FALSE(fs::exists(sessionDir));
}

TEST_F(KloopRunLlm, AResumedRunAsksTheSameProviderWithTheSessionsSettings)
{
    const std::string good = "NOTE: 512 threads per row\n```kl-candidate\n" + fasterKernel() + "```\n";
    const std::string broken = "NOTE: a new helper\n```kl-candidate\n" + nonCompilingKernel() + "```\n";
    server.enqueue(test::openAiStream(test::piecesOf(good, 64), 700, 500));
    server.enqueue(test::openAiStream(test::piecesOf(broken, 64), 720, 510));
    for (int i = 0; i < 6; ++i)
        server.enqueue(test::openAiStream({ "I have no further idea." }, 10, 5));

    const ProcessResult first = runKloop(runArgs("openai", 3), environment("OPENAI_API_KEY"), scratch);
    ASSERT_EQ(first.exitCode, 0) << first.out << first.err;
    // Only the key comes from the environment again; provider, model, base URL and auto-approve are the session's.
    const ProcessResult resumed = runKloop(
        { "run", "--resume", sessionDir.string(), "--budget", "4", "--json" }, environment("OPENAI_API_KEY"), scratch);
    ASSERT_EQ(resumed.exitCode, 0) << resumed.out << resumed.err;
    EXPECT_EQ(resumed.err.find("wait for the engineer's review"), std::string::npos) << resumed.err;

    auto store = SessionStore::open(sessionDir);
    const Session& s = store->session();
    const std::vector<CandidateId> llm = llmCandidates(s);
    ASSERT_EQ(llm.size(), 2u) << resumed.out;
    EXPECT_EQ(s.tree.at(llm[0]).status, CandidateStatus::Accepted);
    EXPECT_EQ(s.tree.at(llm[1]).status, CandidateStatus::CompileFailed);
    EXPECT_EQ(s.tree.at(llm[1]).parentId, llm[0]);
    EXPECT_EQ(s.tree.at(llm[1]).agent, "llm:openai/scripted-model");
    const auto reqs = server.requests();
    ASSERT_EQ(reqs.size(), 2u);
    EXPECT_EQ(json::parse(reqs[1].body).value("model", ""), "scripted-model");
    EXPECT_EQ(reqs[1].headers.count("authorization") ? reqs[1].headers.at("authorization") : "",
        std::string("Bearer ") + kApiKey);
    int calls = 0;
    EXPECT_EQ(llmUsageFromEvents(store->events(), &calls).inputTokens, 700 + 720);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(filesContaining(sessionDir, kApiKey), "");
}

// Two runs on one GPU would time each other's kernels: the second is refused, named the first, and touches nothing.
TEST(KloopRunGpuLock, ASecondRunOnABusyGpuIsRefusedAndNamesTheFirst)
{
    const fs::path scratch = fs::temp_directory_path() / ("kl-gpu-busy-" + std::to_string(::getpid()));
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    ::setenv("KL_GPU_LOCK_DIR", scratch.c_str(), 1);
    std::optional<kl::GpuRunLock> held
        = kl::GpuRunLock::tryAcquire(kl::localGpuKey(), "/sessions/the-first-run", nullptr);
    ::unsetenv("KL_GPU_LOCK_DIR");
    ASSERT_TRUE(held);
    const fs::path second = scratch / "second";
    // No KL_WORKER: the local GPU, which is what the lock guards.
    const ProcessResult r = runKloop({ "run", "--problem", "rmsnorm", "--session", second.string(), "--budget", "1" },
        { { "KL_WORKER", "" }, { "KL_GPU_LOCK_DIR", scratch.string() } }, scratch);
    EXPECT_EQ(r.exitCode, 1) << r.err;
    EXPECT_NE(r.err.find("the GPU is busy"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("/sessions/the-first-run"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("pid " + std::to_string(::getpid())), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(second / "journal.jsonl"));
    held.reset();
    fs::remove_all(scratch);
}

namespace {

// Waits until the server has received n requests; false after the deadline.
bool waitForRequests(const test::LoopbackServer& server, std::size_t n, std::chrono::seconds deadline)
{
    const auto until = std::chrono::steady_clock::now() + deadline;
    while (server.requests().size() < n) {
        if (std::chrono::steady_clock::now() > until)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

test::ScriptedResponse neverAnswers()
{
    test::ScriptedResponse r;
    r.delayBeforeHeadersMs = 10 * 60 * 1000;
    return r;
}

} // namespace

// QA row 213: a stop used to leave the LLM request running for minutes (the loop's cancel token was never
// cancelled). Ctrl-C and SIGTERM now end the request within a second, the journal says so, and --resume continues.
TEST_F(KloopRunLlm, CtrlCOrSigtermDuringAnUnansweredRequestStopsAtOnceAndResumeContinues)
{
    const auto stopDuringRequest = [&](const std::vector<std::string>& args, int sig, std::size_t requestsBefore) {
        server.enqueue(neverAnswers());
        KloopProcess kloop(args, environment("OPENAI_API_KEY"), scratch);
        EXPECT_TRUE(waitForRequests(server, requestsBefore + 1, std::chrono::seconds(60))) << kloop.err();
        std::this_thread::sleep_for(std::chrono::milliseconds(300)); // well inside the transfer
        const auto signalled = std::chrono::steady_clock::now();
        kloop.sendSignal(sig);
        const ProcessResult r = kloop.wait(std::chrono::seconds(20));
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
        EXPECT_LT(seconds, 2.0) << "signal " << sig;
        EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
        EXPECT_EQ(summaryOf(r).value("state", ""), "stopped") << r.out;
        return summaryOf(r).value("reason", "");
    };

    EXPECT_EQ(stopDuringRequest(runArgs("openai", 3), SIGINT, 0), "interrupted (Ctrl-C)");
    {
        auto store = SessionStore::open(sessionDir);
        const std::vector<Event> events = store->events();
        const auto errors = agentRecords(events, "llm.error");
        ASSERT_EQ(errors.size(), 1u);
        EXPECT_EQ(errors[0].value("kind", ""), "cancelled");
        bool noted = false;
        std::string lastState;
        for (const auto& e : events) {
            if (e.kind == EventKind::Note
                && e.data.value("text", "").find("stopped while the agent was working: interrupted (Ctrl-C)")
                    != std::string::npos)
                noted = true;
            if (e.kind == EventKind::SessionState)
                lastState = e.data.value("state", "");
        }
        EXPECT_TRUE(noted);
        EXPECT_EQ(lastState, "stopped");
        EXPECT_TRUE(llmCandidates(store->session()).empty());
    }
    const std::vector<std::string> resume { "run", "--resume", sessionDir.string(), "--budget", "3", "--json" };
    EXPECT_EQ(stopDuringRequest(resume, SIGTERM, 1), "terminated by a signal");

    // Resumed with a provider that answers: the LLM's candidate is evaluated and the run finishes on its budget.
    const std::string good = "NOTE: 512 threads per row\n```kl-candidate\n" + fasterKernel() + "```\n";
    server.enqueue(test::openAiStream(test::piecesOf(good, 64), 700, 500));
    const ProcessResult r = runKloop(resume, environment("OPENAI_API_KEY"), scratch);
    ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
    EXPECT_EQ(summaryOf(r).value("state", ""), "finished") << r.out;
    auto store = SessionStore::open(sessionDir);
    const std::vector<CandidateId> llm = llmCandidates(store->session());
    ASSERT_EQ(llm.size(), 1u);
    EXPECT_EQ(store->session().tree.at(llm[0]).status, CandidateStatus::Accepted);
}

// QA row 248: a 256 MB streamed reply cost 5.7 GB and 1.5 GB of journal. A reply past max_reply_bytes (default
// 1 MiB) is aborted and recorded as a failed attempt with the reason; the journal stays small.
TEST_F(KloopRunLlm, AFloodedReplyIsAbortedAtTheSizeCapAndJournaledBounded)
{
    // 48 MiB of deltas per attempt, no code block: each attempt floods.
    const std::string piece(64 * 1024, 'x');
    const std::vector<std::string> pieces(768, piece);
    for (int i = 0; i < 3; ++i)
        server.enqueue(test::openAiStream(pieces));
    for (int i = 0; i < 6; ++i)
        server.enqueue(test::openAiStream({ "I have no further idea." }, 10, 5));

    const ProcessResult r = runKloop(runArgs("openai", 3), environment("OPENAI_API_KEY"), scratch);
    ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
    std::printf("peak RSS of kloop: %.0f MiB, journal %.2f MiB\n", r.maxRssKb / 1024.0,
        static_cast<double>(fs::file_size(sessionDir / "journal.jsonl")) / (1 << 20));
    EXPECT_LT(fs::file_size(sessionDir / "journal.jsonl"), 4u << 20);
    EXPECT_LT(r.maxRssKb, 1024 * 1024) << "a capped reply must not cost a GiB";

    auto store = SessionStore::open(sessionDir);
    const std::vector<Event> events = store->events();
    const auto rejected = agentRecords(events, "llm.reply-rejected");
    ASSERT_GE(rejected.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(rejected[i].value("kind", ""), "reply-too-large");
        EXPECT_NE(rejected[i].value("message", "").find("max_reply_bytes"), std::string::npos);
    }
    // The model was told, in the same call, and the journaled request names the omitted reply instead of holding it.
    const auto reqs = server.requests();
    ASSERT_GE(reqs.size(), 2u);
    EXPECT_NE(json::parse(reqs[1].body)["messages"].back().value("content", "").find("cut off"), std::string::npos);
    const auto requests = agentRecords(events, "llm.request");
    ASSERT_GE(requests.size(), 2u);
    for (const auto& m : requests[1]["messages"]) {
        if (m.value("role", "") == "assistant") {
            EXPECT_FALSE(m.contains("content")) << m.dump();
        }
    }
}
