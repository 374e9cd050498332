// The providers against a real HTTP server on loopback: both APIs, streaming, retries, failures.
#include "agent/llm/provider.h"
#include "core/errors.h"
#include "loopback_server.h"

#include <arpa/inet.h>
#include <chrono>
#include <cstdlib>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace kl::llm;
using kl::test::LoopbackServer;
using nlohmann::json;

namespace {

constexpr const char* kKeyVar = "KL_TEST_LLM_KEY";
constexpr const char* kKey = "sk-test-secret-0123456789";

ProviderSettings settingsFor(const LoopbackServer& server, ApiKind api)
{
    ::setenv(kKeyVar, kKey, 1);
    ProviderSettings s = providerPreset(api == ApiKind::AnthropicMessages ? "anthropic" : "openai");
    s.baseUrl = server.baseUrl();
    s.model = "loop-model";
    s.apiKeyEnv = kKeyVar;
    s.backoffBaseMs = 10;
    s.backoffMaxMs = 40;
    s.readTimeoutMs = 5000;
    s.connectTimeoutMs = 2000;
    return s;
}

ChatRequest hello()
{
    ChatRequest r;
    r.system = "You write CUDA kernels.";
    r.messages.push_back({ "user", "Make rmsnorm faster." });
    return r;
}

double msSince(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

TEST(Provider, OpenAiStreamingDeliversDeltasUsageAndHeaders)
{
    LoopbackServer server;
    const std::string text = "NOTE: vectorize loads\nsome reply text that is long enough to split";
    server.enqueue(kl::test::openAiStream(kl::test::piecesOf(text, 7), 1000, 200));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    s.prices.models["loop-*"] = ModelPrice { 2.0, 8.0, 1.0 };
    std::vector<std::string> deltas;
    StreamObserver obs;
    obs.onDelta = [&](const std::string& d) { deltas.push_back(d); };
    ChatReply reply = LlmClient(s).complete(hello(), obs, {});
    EXPECT_EQ(reply.text, text);
    EXPECT_GT(deltas.size(), 5u);
    std::string joined;
    for (auto& d : deltas)
        joined += d;
    EXPECT_EQ(joined, text);
    EXPECT_EQ(reply.stopReason, "stop");
    EXPECT_TRUE(reply.usage.reported);
    EXPECT_EQ(reply.usage.inputTokens, 1000);
    EXPECT_EQ(reply.usage.cachedInputTokens, 500);
    EXPECT_EQ(reply.usage.outputTokens, 200);
    EXPECT_TRUE(reply.usage.priced);
    EXPECT_NEAR(reply.usage.costUsd, (500 * 2.0 + 500 * 1.0 + 200 * 8.0) / 1e6, 1e-12);

    auto reqs = server.requests();
    ASSERT_EQ(reqs.size(), 1u);
    EXPECT_EQ(reqs[0].method, "POST");
    EXPECT_EQ(reqs[0].path, "/v1/chat/completions");
    EXPECT_EQ(reqs[0].headers["authorization"], std::string("Bearer ") + kKey);
    json body = json::parse(reqs[0].body);
    EXPECT_EQ(body["model"], "loop-model");
    EXPECT_EQ(body["stream"], true);
    EXPECT_EQ(body["messages"][0]["role"], "system");
    EXPECT_EQ(body["messages"][1]["content"], "Make rmsnorm faster.");
    EXPECT_EQ(body["max_completion_tokens"], s.maxOutputTokens); // the openai preset's field
    EXPECT_FALSE(body.contains("max_tokens"));
}

TEST(Provider, AnthropicStreamingUsesMessagesApi)
{
    LoopbackServer server;
    const std::string text = "Claude-style reply, streamed in several text deltas.";
    server.enqueue(kl::test::anthropicStream(kl::test::piecesOf(text, 5), 321, 45));
    auto s = settingsFor(server, ApiKind::AnthropicMessages);
    int deltas = 0;
    StreamObserver obs;
    obs.onDelta = [&](const std::string&) { ++deltas; };
    ChatReply reply = LlmClient(s).complete(hello(), obs, {});
    EXPECT_EQ(reply.text, text);
    EXPECT_GT(deltas, 5);
    EXPECT_EQ(reply.model, "loop-claude");
    EXPECT_EQ(reply.stopReason, "end_turn");
    EXPECT_EQ(reply.usage.inputTokens, 321);
    EXPECT_EQ(reply.usage.outputTokens, 45);
    EXPECT_FALSE(reply.usage.priced);
    auto reqs = server.requests();
    ASSERT_EQ(reqs.size(), 1u);
    EXPECT_EQ(reqs[0].path, "/v1/messages");
    EXPECT_EQ(reqs[0].headers["x-api-key"], kKey);
    EXPECT_EQ(reqs[0].headers["anthropic-version"], "2023-06-01");
    EXPECT_EQ(reqs[0].headers.count("authorization"), 0u);
    json body = json::parse(reqs[0].body);
    EXPECT_EQ(body["system"], "You write CUDA kernels.");
    EXPECT_EQ(body["messages"].size(), 1u);
    EXPECT_EQ(body["messages"][0]["role"], "user");
    EXPECT_TRUE(body["max_tokens"].is_number_integer());
}

TEST(Provider, NonStreamingRepliesOfBothApis)
{
    LoopbackServer server;
    server.enqueue(kl::test::openAiWhole("whole openai", 11, 3));
    server.enqueue(kl::test::anthropicWhole("whole anthropic", 12, 4));
    auto o = settingsFor(server, ApiKind::OpenAiChat);
    o.stream = false;
    auto a = settingsFor(server, ApiKind::AnthropicMessages);
    a.stream = false;
    auto r1 = LlmClient(o).complete(hello(), {}, {});
    auto r2 = LlmClient(a).complete(hello(), {}, {});
    EXPECT_EQ(r1.text, "whole openai");
    EXPECT_EQ(r1.usage.outputTokens, 3);
    EXPECT_EQ(r2.text, "whole anthropic");
    EXPECT_EQ(r2.usage.inputTokens, 12);
    EXPECT_FALSE(json::parse(server.requests()[0].body).contains("stream"));
    EXPECT_TRUE(json::parse(server.requests()[1].body).contains("max_tokens")); // anthropic always
}

TEST(Provider, RateLimitHonoursRetryAfter)
{
    LoopbackServer server;
    server.enqueue(kl::test::jsonResponse(429, R"({"error":{"message":"slow down"}})", { { "Retry-After", "1" } }));
    server.enqueue(kl::test::openAiStream({ "ok" }));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    std::vector<int> delays;
    StreamObserver obs;
    obs.onRetry = [&](int attempt, int delayMs, const std::string& why) {
        EXPECT_EQ(attempt, 2);
        EXPECT_NE(why.find("429"), std::string::npos);
        delays.push_back(delayMs);
    };
    const auto t0 = std::chrono::steady_clock::now();
    auto reply = LlmClient(s).complete(hello(), obs, {});
    EXPECT_EQ(reply.text, "ok");
    EXPECT_EQ(reply.attempts, 2);
    ASSERT_EQ(delays.size(), 1u);
    EXPECT_EQ(delays[0], 1000); // the server's value, not our 10 ms backoff
    EXPECT_GE(msSince(t0), 990);
    EXPECT_EQ(server.requests().size(), 2u);
}

TEST(Provider, RetryAfterLongerThanLimitFailsAtOnce)
{
    LoopbackServer server;
    server.enqueue(kl::test::jsonResponse(429, R"({"error":{"message":"quota"}})", { { "Retry-After", "3600" } }));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    s.maxRetryAfterMs = 2000;
    try {
        LlmClient(s).complete(hello(), {}, {});
        FAIL() << "expected a rate-limit error";
    } catch (const LlmError& e) {
        EXPECT_EQ(e.kind(), LlmError::Kind::RateLimited);
        EXPECT_NE(std::string(e.what()).find("3600 s"), std::string::npos) << e.what();
    }
    EXPECT_EQ(server.requests().size(), 1u);
}

TEST(Provider, ServerErrorsAreRetriedWithBackoffThenSucceed)
{
    LoopbackServer server;
    server.enqueue(kl::test::jsonResponse(500, R"({"error":{"message":"boom"}})"));
    server.enqueue(kl::test::jsonResponse(503, "<html>unavailable</html>"));
    server.enqueue(kl::test::openAiStream({ "third time" }));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    std::vector<int> delays;
    StreamObserver obs;
    obs.onRetry = [&](int, int d, const std::string&) { delays.push_back(d); };
    auto reply = LlmClient(s).complete(hello(), obs, {});
    EXPECT_EQ(reply.text, "third time");
    EXPECT_EQ(reply.attempts, 3);
    ASSERT_EQ(delays.size(), 2u);
    EXPECT_GE(delays[0], 5); // equal jitter: [base/2, base]
    EXPECT_LE(delays[0], 10);
    EXPECT_GE(delays[1], 10); // doubled
    EXPECT_LE(delays[1], 20);
}

TEST(Provider, PersistentServerErrorGivesUpAfterMaxAttempts)
{
    LoopbackServer server;
    for (int i = 0; i < 3; ++i)
        server.enqueue(kl::test::jsonResponse(502, R"({"error":{"message":"bad gateway"}})"));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    s.maxAttempts = 3;
    try {
        LlmClient(s).complete(hello(), {}, {});
        FAIL();
    } catch (const LlmError& e) {
        EXPECT_EQ(e.kind(), LlmError::Kind::Server);
        EXPECT_EQ(e.httpStatus(), 502);
        EXPECT_NE(std::string(e.what()).find("gave up after 3 attempts"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("bad gateway"), std::string::npos) << e.what();
    }
    EXPECT_EQ(server.requests().size(), 3u);
}

TEST(Provider, DroppedConnectionsAreRetried)
{
    LoopbackServer server;
    kl::test::ScriptedResponse hangUp;
    hangUp.closeWithoutReply = true;
    server.enqueue(hangUp);
    auto midStream = kl::test::openAiStream({ "partial ", "text ", "that never ends" });
    midStream.chunks.resize(3); // role chunk + two deltas, then the connection drops
    midStream.dropMidBody = true;
    server.enqueue(midStream);
    server.enqueue(kl::test::openAiStream({ "complete reply" }));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    std::string shown;
    int retries = 0;
    StreamObserver obs;
    obs.onDelta = [&](const std::string& d) { shown += d; };
    obs.onRetry = [&](int, int, const std::string&) {
        ++retries;
        shown.clear(); // what the GUI does: the partial text is void
    };
    auto reply = LlmClient(s).complete(hello(), obs, {});
    EXPECT_EQ(reply.text, "complete reply");
    EXPECT_EQ(shown, "complete reply");
    EXPECT_EQ(retries, 2);
    EXPECT_EQ(reply.attempts, 3);
}

TEST(Provider, DropAfterTheStopReasonKeepsTheCompleteReply)
{
    LoopbackServer server;
    auto r = kl::test::openAiStream({ "all ", "of it" });
    r.chunks.resize(r.chunks.size() - 2); // no usage chunk, no [DONE]
    r.dropMidBody = true;
    server.enqueue(r);
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    auto reply = LlmClient(s).complete(hello(), {}, {});
    EXPECT_EQ(reply.text, "all of it");
    EXPECT_EQ(reply.attempts, 1);
    EXPECT_FALSE(reply.usage.reported);
    EXPECT_EQ(server.requests().size(), 1u);
}

TEST(Provider, AnthropicOverloadedEventInStreamIsRetried)
{
    LoopbackServer server;
    kl::test::ScriptedResponse overloaded;
    overloaded.chunked = true;
    overloaded.headers.emplace_back("Content-Type", "text/event-stream");
    overloaded.chunks.push_back(
        { "event: error\ndata: "
          "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            0 });
    server.enqueue(overloaded);
    server.enqueue(kl::test::anthropicStream({ "fine now" }));
    auto s = settingsFor(server, ApiKind::AnthropicMessages);
    auto reply = LlmClient(s).complete(hello(), {}, {});
    EXPECT_EQ(reply.text, "fine now");
    EXPECT_EQ(reply.attempts, 2);
}

TEST(Provider, SlowServerHitsReadTimeout)
{
    LoopbackServer server;
    auto slow = kl::test::openAiStream({ "late" });
    slow.delayBeforeHeadersMs = 3000;
    server.enqueue(slow);
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    s.readTimeoutMs = 300;
    s.maxAttempts = 1;
    const auto t0 = std::chrono::steady_clock::now();
    try {
        LlmClient(s).complete(hello(), {}, {});
        FAIL();
    } catch (const LlmError& e) {
        EXPECT_EQ(e.kind(), LlmError::Kind::Timeout) << e.what();
    }
    EXPECT_LT(msSince(t0), 2000);
}

TEST(Provider, SlowButSteadyStreamIsNotATimeout)
{
    LoopbackServer server;
    // 12 pieces 100 ms apart: 1.2 s in total, but never silent for the 400 ms read timeout.
    server.enqueue(kl::test::openAiStream(kl::test::piecesOf("abcdefghijklmnopqrstuvwx", 2), 10, 10, 100));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    s.readTimeoutMs = 400;
    s.maxAttempts = 1;
    auto reply = LlmClient(s).complete(hello(), {}, {});
    EXPECT_EQ(reply.text, "abcdefghijklmnopqrstuvwx");
    EXPECT_GE(reply.elapsedMs, 1100);
}

TEST(Provider, CancellationStopsAStreamQuickly)
{
    LoopbackServer server;
    server.enqueue(kl::test::openAiStream(kl::test::piecesOf(std::string(100, 'x'), 1), 10, 10, 100));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    kl::CancelToken cancel;
    int deltas = 0;
    StreamObserver obs;
    obs.onDelta = [&](const std::string&) { ++deltas; };
    std::thread canceller([cancel] {
        std::this_thread::sleep_for(std::chrono::milliseconds(350));
        cancel.cancel();
    });
    const auto t0 = std::chrono::steady_clock::now();
    try {
        LlmClient(s).complete(hello(), obs, cancel);
        FAIL();
    } catch (const LlmError& e) {
        EXPECT_EQ(e.kind(), LlmError::Kind::Cancelled);
    }
    canceller.join();
    EXPECT_LT(msSince(t0), 1500);
    EXPECT_GE(deltas, 1);
    EXPECT_LT(deltas, 100);
}

TEST(Provider, MalformedJsonIsAClearErrorNotARetry)
{
    LoopbackServer server;
    server.enqueue(kl::test::jsonResponse(200, "{\"choices\": [ {\"message\": "));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    s.stream = false;
    try {
        LlmClient(s).complete(hello(), {}, {});
        FAIL();
    } catch (const LlmError& e) {
        EXPECT_EQ(e.kind(), LlmError::Kind::BadResponse);
        EXPECT_NE(std::string(e.what()).find("malformed JSON"), std::string::npos) << e.what();
    }
    EXPECT_EQ(server.requests().size(), 1u);

    kl::test::ScriptedResponse badStream;
    badStream.chunked = true;
    badStream.chunks.push_back({ "data: {\"choices\": [{\"delta\": {\"content\": \"a\"}}]}\n\n", 0 });
    badStream.chunks.push_back({ "data: {not json}\n\n", 0 });
    server.enqueue(badStream);
    s.stream = true;
    try {
        LlmClient(s).complete(hello(), {}, {});
        FAIL();
    } catch (const LlmError& e) {
        EXPECT_EQ(e.kind(), LlmError::Kind::BadResponse);
        EXPECT_NE(std::string(e.what()).find("{not json}"), std::string::npos) << e.what();
    }
}

TEST(Provider, AuthFailureNamesTheVariableNeverTheKey)
{
    LoopbackServer server;
    server.enqueue(kl::test::jsonResponse(401,
        std::string(R"({"error":{"message":"Incorrect API key provided: )") + kKey
            + R"(","type":"invalid_request_error"}})"));
    server.enqueue(kl::test::jsonResponse(403, R"({"error":{"message":"forbidden"}})"));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    for (int i = 0; i < 2; ++i) {
        try {
            LlmClient(s).complete(hello(), {}, {});
            FAIL();
        } catch (const LlmError& e) {
            const std::string msg = e.what();
            EXPECT_EQ(e.kind(), LlmError::Kind::Auth);
            EXPECT_NE(msg.find(kKeyVar), std::string::npos) << msg;
            EXPECT_EQ(msg.find("0123456789"), std::string::npos) << msg;
        }
    }
    EXPECT_EQ(server.requests().size(), 2u); // no retries
}

TEST(Provider, UnknownModelIsAClearError)
{
    LoopbackServer server;
    server.enqueue(kl::test::jsonResponse(
        404, R"({"error":{"message":"The model `loop-model` does not exist","code":"model_not_found"}})"));
    server.enqueue(kl::test::jsonResponse(400, R"({"error":"model 'loop-model' not found, try pulling it first"})"));
    server.enqueue(kl::test::jsonResponse(400, R"({"error":{"message":"max_tokens is too large"}})"));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    for (int i = 0; i < 2; ++i) {
        try {
            LlmClient(s).complete(hello(), {}, {});
            FAIL();
        } catch (const LlmError& e) {
            EXPECT_EQ(e.kind(), LlmError::Kind::ModelNotFound) << e.what();
            EXPECT_NE(std::string(e.what()).find("'loop-model'"), std::string::npos) << e.what();
        }
    }
    try {
        LlmClient(s).complete(hello(), {}, {});
        FAIL();
    } catch (const LlmError& e) {
        EXPECT_EQ(e.kind(), LlmError::Kind::BadRequest) << e.what();
    }
    EXPECT_EQ(server.requests().size(), 3u);
}

TEST(Provider, LoopbackBypassesAnEnvironmentProxy)
{
    LoopbackServer server;
    server.enqueue(kl::test::openAiStream({ "direct" }));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    s.maxAttempts = 1;
    ::setenv("http_proxy", "http://127.0.0.1:9", 1); // nothing listens on the discard port
    auto reply = LlmClient(s).complete(hello(), {}, {});
    ::unsetenv("http_proxy");
    EXPECT_EQ(reply.text, "direct");
}

TEST(Provider, ConnectionRefusedIsANetworkError)
{
    // Find a port nobody listens on: bind, read the port, close.
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    ProviderSettings s = providerPreset("vllm");
    s.baseUrl = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/v1";
    s.model = "m";
    s.maxAttempts = 2;
    s.backoffBaseMs = 5;
    ::unsetenv("VLLM_API_KEY");
    try {
        LlmClient(s).complete(hello(), {}, {});
        FAIL();
    } catch (const LlmError& e) {
        EXPECT_EQ(e.kind(), LlmError::Kind::Network) << e.what();
        EXPECT_NE(std::string(e.what()).find("gave up after 2 attempts"), std::string::npos) << e.what();
    }
}

// QA row 248: a server that streams without end, or sends one huge body, is cut off at max_reply_bytes once (not
// retried: every try is paid for), whichever API and mode.
TEST(Provider, AReplyPastMaxReplyBytesIsAbortedOnceAndNamesTheLimit)
{
    LoopbackServer server;
    const std::vector<std::string> flood(64, std::string(32 * 1024, 'x')); // 2 MiB of deltas
    server.enqueue(kl::test::openAiStream(flood));
    server.enqueue(kl::test::openAiWhole(std::string(3 << 20, 'y')));
    auto s = settingsFor(server, ApiKind::OpenAiChat);
    s.maxReplyBytes = 256 * 1024;
    for (const bool stream : { true, false }) {
        s.stream = stream;
        try {
            LlmClient(s).complete(hello(), {}, {});
            FAIL() << "stream=" << stream;
        } catch (const LlmError& e) {
            EXPECT_EQ(e.kind(), LlmError::Kind::ReplyTooLarge) << e.what();
            EXPECT_NE(std::string(e.what()).find("262144 bytes (max_reply_bytes"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(server.requests().size(), 2u);
    // A reply under the cap is untouched.
    server.enqueue(kl::test::openAiStream(kl::test::piecesOf(std::string(100 * 1024, 'z'), 4096)));
    s.stream = true;
    EXPECT_EQ(LlmClient(s).complete(hello(), {}, {}).text.size(), 100u * 1024);
    EXPECT_EQ(providerSettingsFromJson(nlohmann::json { { "max_reply_bytes", 4096 } }, "t", s).maxReplyBytes, 4096);
    EXPECT_THROW(providerSettingsFromJson(nlohmann::json { { "max_reply_bytes", 0 } }, "t", s), kl::InputError);
}

TEST(Provider, MissingKeyOrModelIsAConfigError)
{
    ProviderSettings s = providerPreset("openai");
    s.apiKeyEnv = "KL_TEST_DEFINITELY_UNSET_VAR";
    s.model = "x";
    ::unsetenv("KL_TEST_DEFINITELY_UNSET_VAR");
    try {
        LlmClient(s).complete(hello(), {}, {});
        FAIL();
    } catch (const LlmError& e) {
        EXPECT_EQ(e.kind(), LlmError::Kind::Config);
        EXPECT_NE(std::string(e.what()).find("KL_TEST_DEFINITELY_UNSET_VAR"), std::string::npos);
    }
    s.model.clear();
    EXPECT_THROW(LlmClient(s).complete(hello(), {}, {}), LlmError);
}

TEST(Provider, RetryAfterParsing)
{
    EXPECT_EQ(LlmClient::parseRetryAfterMs("2", 0), 2000);
    EXPECT_EQ(LlmClient::parseRetryAfterMs("0.5", 0), 500);
    EXPECT_FALSE(LlmClient::parseRetryAfterMs("soon", 0).has_value());
    // Wed, 21 Oct 2015 07:28:00 GMT = 1445412480
    EXPECT_EQ(LlmClient::parseRetryAfterMs("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470), 10000);
    EXPECT_EQ(LlmClient::parseRetryAfterMs("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490), 0);
}

TEST(Provider, SettingsJsonRoundTripRejectsKeysAndUnknownFields)
{
    ProviderSettings s = providerPreset("deepseek");
    s.prices.models["deepseek-chat"] = { 0.3, 1.2, 0.1 };
    ProviderSettings back = providerSettingsFromJson(toJson(s), "settings", providerPreset("openai"));
    EXPECT_EQ(back.name, "deepseek");
    EXPECT_EQ(back.baseUrl, s.baseUrl);
    EXPECT_EQ(back.apiKeyEnv, "DEEPSEEK_API_KEY");
    ASSERT_TRUE(back.prices.find("deepseek-chat").has_value());
    EXPECT_DOUBLE_EQ(back.prices.find("deepseek-chat")->outputPerMTok, 1.2);
    EXPECT_THROW(providerSettingsFromJson(json { { "api_key", "sk-x" } }, "s", s), kl::InputError);
    EXPECT_THROW(providerSettingsFromJson(json { { "modle", "x" } }, "s", s), kl::InputError);
    EXPECT_THROW(providerSettingsFromJson(json { { "max_attempts", 0 } }, "s", s), kl::InputError);
    EXPECT_THROW(providerPreset("nope"), kl::InputError);
    EXPECT_EQ(toJson(s).dump().find("sk-"), std::string::npos);
}
