// The LLM client: the request, its transport with retries and backoff, and the errors it maps HTTP failures to.
#include "agent/llm/http_client.h"
#include "agent/llm/provider.h"
#include "agent/llm/reply_wire.h"
#include "core/errors.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <random>
#include <regex>
#include <thread>

namespace kl::llm {

using nlohmann::json;

std::string truncated(const std::string& s, std::size_t n)
{
    return s.size() <= n ? s : s.substr(0, n) + "...";
}

std::int64_t intField(const json& j, const char* key)
{
    if (j.is_object() && j.contains(key) && j[key].is_number_integer())
        return j[key].get<std::int64_t>();
    return 0;
}

LlmError streamErrorFrom(const json& e)
{
    std::string type;
    std::string msg;
    if (e.is_object()) {
        type = e.value("type", std::string());
        if (e.contains("message") && e["message"].is_string())
            msg = e["message"].get<std::string>();
        if (e.contains("code") && e["code"].is_string() && type.empty())
            type = e["code"].get<std::string>();
    } else if (e.is_string()) {
        msg = e.get<std::string>();
    }
    const bool transient
        = type == "overloaded_error" || type == "api_error" || type == "server_error" || type == "rate_limit_error";
    return LlmError(transient ? LlmError::Kind::Server : LlmError::Kind::BadResponse,
        "error event in the reply stream" + (type.empty() ? std::string() : " (" + type + ")") + ": "
            + (msg.empty() ? e.dump() : msg));
}

json parseReplyJson(const std::string& text, const char* what)
{
    try {
        return json::parse(text);
    } catch (const std::exception& e) {
        throw LlmError(LlmError::Kind::BadResponse,
            std::string("malformed JSON ") + what + ": " + e.what() + ": " + truncated(text, 200));
    }
}

void parseWholeReply(ApiKind api, const std::string& body, ReplyState& st)
{
    json j = parseReplyJson(body, "reply");
    if (!j.is_object())
        throw LlmError(LlmError::Kind::BadResponse, "reply is not a JSON object: " + truncated(body, 200));
    if (j.contains("error") && !j["error"].is_null())
        throw streamErrorFrom(j["error"]);
    if (j.contains("model") && j["model"].is_string())
        st.model = j["model"].get<std::string>();
    if (api == ApiKind::OpenAiChat)
        readOpenAiReply(j, body, st);
    else
        readAnthropicReply(j, body, st);
    st.done = true;
}

namespace {

    using Clock = std::chrono::steady_clock;

    // Servers sometimes echo (part of) the key in an error; never let it reach a message.
    std::string redact(std::string text, const std::string& key)
    {
        if (key.size() >= 4) {
            for (auto pos = text.find(key); pos != std::string::npos; pos = text.find(key, pos))
                text.replace(pos, key.size(), "<redacted>");
        }
        static const std::regex keyish(R"((sk-|sk_|key-)[A-Za-z0-9_\-\*\.]{6,})");
        return std::regex_replace(text, keyish, "<redacted>");
    }

    std::string serverMessage(const std::string& body)
    {
        try {
            const json j = json::parse(body);
            if (j.contains("error")) {
                const auto& e = j["error"];
                if (e.is_string())
                    return e.get<std::string>();
                if (e.is_object() && e.contains("message") && e["message"].is_string())
                    return e["message"].get<std::string>();
            }
            if (j.contains("message") && j["message"].is_string())
                return j["message"].get<std::string>();
            if (j.contains("detail") && j["detail"].is_string())
                return j["detail"].get<std::string>();
        } catch (const std::exception&) {
        }
        return truncated(body);
    }

    bool mentionsMissingModel(const std::string& msg)
    {
        std::string m = msg;
        std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return char(std::tolower(c)); });
        if (m.find("model") == std::string::npos)
            return false;
        for (const char* w : { "not found", "does not exist", "not exist", "unknown model", "invalid model",
                 "not a valid model", "no such model", "model_not_found" })
            if (m.find(w) != std::string::npos)
                return true;
        return false;
    }

    double costOf(const Usage& u, const std::optional<ModelPrice>& p)
    {
        if (!p)
            return 0;
        const double cachedPrice = p->cachedInputPerMTok >= 0 ? p->cachedInputPerMTok : p->inputPerMTok;
        const double uncached = double(std::max<std::int64_t>(0, u.inputTokens - u.cachedInputTokens));
        return (uncached * p->inputPerMTok + double(u.cachedInputTokens) * cachedPrice
                   + double(u.outputTokens) * p->outputPerMTok)
            / 1e6;
    }

    bool sleepCancellable(int ms, const CancelToken& cancel)
    {
        const auto until = Clock::now() + std::chrono::milliseconds(ms);
        while (Clock::now() < until) {
            if (cancel.cancelled())
                return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int>(
                20, int(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count()) + 1)));
        }
        return !cancel.cancelled();
    }

    int jitteredBackoffMs(const ProviderSettings& s, int attempt)
    {
        thread_local std::mt19937 rng { std::random_device {}() };
        const double raw = double(s.backoffBaseMs) * std::pow(2.0, std::max(0, attempt - 1));
        const double capped = std::min(raw, double(s.backoffMaxMs));
        // "Equal jitter": at least half the backoff, so retries never hammer, spread over the other half.
        std::uniform_real_distribution<double> d(capped / 2, capped);
        return int(d(rng));
    }

} // namespace

std::optional<int> LlmClient::parseRetryAfterMs(const std::string& value, std::int64_t nowEpochSec)
{
    std::string v = value;
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back())))
        v.pop_back();
    if (v.empty())
        return std::nullopt;
    char* end = nullptr;
    const double secs = std::strtod(v.c_str(), &end);
    if (end && *end == '\0') {
        if (secs < 0 || !std::isfinite(secs))
            return std::nullopt;
        return int(std::min(secs * 1000.0, 1e9));
    }
    std::tm tm {};
    if (const char* rest = strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm); rest && *rest == '\0') {
        const std::int64_t at = timegm(&tm);
        return int(std::clamp<std::int64_t>((at - nowEpochSec) * 1000, 0, 1'000'000'000));
    }
    return std::nullopt;
}

LlmClient::LlmClient(ProviderSettings s)
    : m_settings(std::move(s))
{
}

std::string LlmClient::endpoint() const
{
    std::string base = m_settings.baseUrl;
    while (!base.empty() && base.back() == '/')
        base.pop_back();
    return base + (m_settings.api == ApiKind::AnthropicMessages ? "/messages" : "/chat/completions");
}

json LlmClient::requestBody(const ChatRequest& req) const
{
    json messages = json::array();
    const auto& s = m_settings;
    if (s.api == ApiKind::OpenAiChat && !req.system.empty())
        messages.push_back({ { "role", "system" }, { "content", req.system } });
    for (const auto& m : req.messages)
        messages.push_back({ { "role", m.role }, { "content", m.content } });
    json body = { { "model", s.model }, { "messages", messages } };
    if (s.api == ApiKind::OpenAiChat) {
        body[s.maxTokensField.empty() ? std::string("max_tokens") : s.maxTokensField] = s.maxOutputTokens;
        if (s.stream) {
            body["stream"] = true;
            if (s.streamUsage)
                body["stream_options"] = { { "include_usage", true } };
        }
    } else {
        body["max_tokens"] = s.maxOutputTokens;
        if (!req.system.empty())
            body["system"] = req.system;
        if (s.stream)
            body["stream"] = true;
    }
    if (s.temperature)
        body["temperature"] = *s.temperature;
    return body;
}

std::string LlmClient::checkConfig() const
{
    const auto& s = m_settings;
    if (s.model.empty())
        throw LlmError(LlmError::Kind::Config,
            "provider '" + s.name
                + "' has no model set (kloop run: pass --llm-model NAME; or set \"model\" in the provider "
                  "settings, --llm-settings FILE)");
    if (s.baseUrl.empty())
        throw LlmError(LlmError::Kind::Config, "provider '" + s.name + "' has no base URL");
    std::string key;
    if (!s.apiKeyEnv.empty()) {
        const char* k = std::getenv(s.apiKeyEnv.c_str());
        key = k ? k : "";
    }
    if (key.empty() && s.apiKeyRequired)
        throw LlmError(LlmError::Kind::Config,
            "provider '" + s.name
                + "' needs an API key: set the environment "
                  "variable "
                + (s.apiKeyEnv.empty() ? std::string("(none named)") : s.apiKeyEnv));
    return key;
}

ChatReply LlmClient::complete(const ChatRequest& req, const StreamObserver& obs, const CancelToken& cancel) const
{
    const auto& s = m_settings;
    const std::string key = checkConfig();
    if (req.messages.empty())
        throw LlmError(LlmError::Kind::Config, "a chat request needs at least one message");

    HttpRequest http;
    http.url = endpoint();
    http.body = requestBody(req).dump();
    http.connectTimeoutMs = s.connectTimeoutMs;
    http.readTimeoutMs = s.readTimeoutMs;
    http.maxBodyBytes = static_cast<std::size_t>(s.maxReplyBytes);
    http.headers.emplace_back("Content-Type", "application/json");
    http.headers.emplace_back("Accept", s.stream ? "text/event-stream" : "application/json");
    if (s.api == ApiKind::AnthropicMessages) {
        http.headers.emplace_back("anthropic-version", "2023-06-01");
        if (!key.empty())
            http.headers.emplace_back("x-api-key", key);
    } else if (!key.empty()) {
        http.headers.emplace_back("Authorization", "Bearer " + key);
    }

    const auto started = Clock::now();
    std::optional<LlmError> last;
    const int attempts = std::max(1, s.maxAttempts);
    for (int attempt = 1; attempt <= attempts; ++attempt) {
        ReplyState st;
        SseParser sse;
        std::optional<LlmError> parseError;
        BodyChunkFn onChunk;
        if (s.stream) {
            onChunk = [&](const char* data, std::size_t n) {
                try {
                    for (const auto& ev : sse.feed(data, n)) {
                        if (s.api == ApiKind::AnthropicMessages)
                            onAnthropicEvent(ev, st, obs);
                        else
                            onOpenAiEvent(ev, st, obs);
                        if (st.streamError)
                            return false;
                    }
                } catch (const LlmError& e) {
                    parseError = e;
                    return false;
                }
                return true;
            };
        }
        HttpResult r = httpPost(http, onChunk, cancel);
        const int status = r.response.status;
        std::optional<int> retryAfterMs;
        bool retryable = false;

        if (r.failure == TransportFailure::Cancelled || cancel.cancelled())
            throw LlmError(LlmError::Kind::Cancelled, "the request to " + http.url + " was cancelled");
        // Not retried: the same prompt would most likely bring the same flood, and each try is paid for.
        if (r.failure == TransportFailure::TooLarge)
            throw LlmError(LlmError::Kind::ReplyTooLarge,
                "the reply from " + http.url + " passed " + std::to_string(s.maxReplyBytes)
                    + " bytes (max_reply_bytes in the provider settings); the request was aborted",
                status);

        if (status >= 200 && status < 300 && !parseError && !st.streamError) {
            try {
                if (!s.stream) {
                    if (r.failure != TransportFailure::None)
                        throw LlmError(LlmError::Kind::Network, "connection failed mid-reply: " + r.error);
                    parseWholeReply(s.api, r.response.body, st);
                } else {
                    for (const auto& ev : sse.feed("\n\n")) { // flush an event the server did not terminate
                        if (s.api == ApiKind::AnthropicMessages)
                            onAnthropicEvent(ev, st, obs);
                        else
                            onOpenAiEvent(ev, st, obs);
                    }
                    // A stop reason means the text is complete; a connection lost after it (before [DONE] or
                    // message_stop) costs at most the usage numbers, not a second paid call.
                    if (!st.stopReason.empty())
                        st.done = true;
                    if (!st.done && !st.streamError) {
                        const bool sawEvents = !st.text.empty() || !st.model.empty();
                        const std::string why = r.failure != TransportFailure::None ? r.error
                            : sawEvents ? "the stream ended before its final event"
                                        : "the reply is not an event stream: " + truncated(r.response.body, 200);
                        throw LlmError(r.failure == TransportFailure::Timeout      ? LlmError::Kind::Timeout
                                : sawEvents || r.failure != TransportFailure::None ? LlmError::Kind::Network
                                                                                   : LlmError::Kind::BadResponse,
                            "reply from " + http.url + " incomplete: " + why);
                    }
                }
                if (st.streamError)
                    throw *st.streamError;
                ChatReply reply;
                reply.text = std::move(st.text);
                reply.model = st.model.empty() ? s.model : st.model;
                reply.stopReason = st.stopReason;
                reply.usage = st.usage;
                const auto price = s.prices.find(s.model);
                reply.usage.priced = price.has_value();
                reply.usage.costUsd = costOf(reply.usage, price);
                reply.attempts = attempt;
                reply.elapsedMs = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
                return reply;
            } catch (const LlmError& e) {
                last = LlmError(e.kind(), redact(e.what(), key), status);
                retryable = e.kind() == LlmError::Kind::Network || e.kind() == LlmError::Kind::Timeout
                    || e.kind() == LlmError::Kind::Server;
            }
        } else if (parseError) {
            last = LlmError(parseError->kind(), redact(parseError->what(), key), status);
        } else if (st.streamError) {
            last = LlmError(st.streamError->kind(), redact(st.streamError->what(), key), status);
            retryable = st.streamError->kind() == LlmError::Kind::Server;
        } else if (status == 0) {
            const bool timeout = r.failure == TransportFailure::Timeout;
            last = LlmError(timeout ? LlmError::Kind::Timeout : LlmError::Kind::Network,
                std::string(timeout ? "timed out" : "could not reach") + " " + http.url + ": " + r.error);
            retryable = true;
        } else {
            const std::string msg = redact(serverMessage(r.response.body), key);
            const std::string where = "HTTP " + std::to_string(status) + " from " + http.url;
            if (status == 401 || status == 403) {
                last = LlmError(LlmError::Kind::Auth,
                    where + ": authentication failed (" + msg + "); check the key in $"
                        + (s.apiKeyEnv.empty() ? std::string("<no variable named>") : s.apiKeyEnv)
                        + (key.empty() ? " (the variable is not set)" : ""),
                    status);
            } else if (status == 404 || ((status == 400 || status == 422) && mentionsMissingModel(msg))) {
                last = LlmError(LlmError::Kind::ModelNotFound,
                    where + ": model '" + s.model + "' not found or the endpoint does not exist (" + msg + ")", status);
            } else if (status == 429 || status == 408) {
                last = LlmError(LlmError::Kind::RateLimited, where + ": rate limited (" + msg + ")", status);
                retryable = true;
            } else if (status >= 500) {
                last = LlmError(LlmError::Kind::Server, where + ": server error (" + msg + ")", status);
                retryable = true;
            } else {
                last = LlmError(LlmError::Kind::BadRequest, where + ": request rejected (" + msg + ")", status);
            }
            const auto& h = r.response.headers;
            if (auto it = h.find("retry-after"); it != h.end())
                retryAfterMs = parseRetryAfterMs(it->second, std::int64_t(std::time(nullptr)));
            else if (auto it2 = h.find("retry-after-ms"); it2 != h.end()) {
                char* end = nullptr;
                const double ms = std::strtod(it2->second.c_str(), &end);
                if (end && *end == '\0' && ms >= 0)
                    retryAfterMs = int(ms);
            }
        }

        if (!retryable || attempt == attempts)
            break;
        if (retryAfterMs && *retryAfterMs > s.maxRetryAfterMs)
            throw LlmError(LlmError::Kind::RateLimited,
                std::string(last->what()) + "; the server asks to wait " + std::to_string(*retryAfterMs / 1000)
                    + " s, longer than max_retry_after_ms",
                last->httpStatus());
        const int delay = retryAfterMs ? *retryAfterMs : jitteredBackoffMs(s, attempt);
        if (obs.onRetry)
            obs.onRetry(attempt + 1, delay, last->what());
        if (!sleepCancellable(delay, cancel))
            throw LlmError(LlmError::Kind::Cancelled, "cancelled while waiting to retry " + http.url);
    }
    const std::string suffix = attempts > 1
            && (last->kind() == LlmError::Kind::RateLimited || last->kind() == LlmError::Kind::Server
                || last->kind() == LlmError::Kind::Network || last->kind() == LlmError::Kind::Timeout)
        ? " (gave up after " + std::to_string(attempts) + " attempts)"
        : std::string();
    throw LlmError(last->kind(), std::string(last->what()) + suffix, last->httpStatus());
}

} // namespace kl::llm
