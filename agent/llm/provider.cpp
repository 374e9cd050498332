#include "agent/llm/provider.h"

#include "agent/llm/http_client.h"
#include "agent/llm/sse.h"
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

const char* apiKindName(ApiKind k)
{
    return k == ApiKind::AnthropicMessages ? "anthropic" : "openai";
}

ApiKind apiKindFromName(const std::string& s)
{
    if (s == "openai")
        return ApiKind::OpenAiChat;
    if (s == "anthropic")
        return ApiKind::AnthropicMessages;
    throw InputError("unknown API kind '" + s + "' (expected \"openai\" or \"anthropic\")");
}

const char* llmErrorKindName(LlmError::Kind k)
{
    switch (k) {
    case LlmError::Kind::Config:
        return "config";
    case LlmError::Kind::Auth:
        return "auth";
    case LlmError::Kind::ModelNotFound:
        return "model-not-found";
    case LlmError::Kind::RateLimited:
        return "rate-limited";
    case LlmError::Kind::Server:
        return "server";
    case LlmError::Kind::Network:
        return "network";
    case LlmError::Kind::Timeout:
        return "timeout";
    case LlmError::Kind::Cancelled:
        return "cancelled";
    case LlmError::Kind::BadResponse:
        return "bad-response";
    case LlmError::Kind::BadRequest:
        return "bad-request";
    case LlmError::Kind::ReplyTooLarge:
        return "reply-too-large";
    }
    return "unknown";
}

// ---- prices ---------------------------------------------------------------------------------------

std::optional<ModelPrice> PriceTable::find(const std::string& model) const
{
    if (auto it = models.find(model); it != models.end())
        return it->second;
    std::optional<ModelPrice> best;
    std::size_t bestLen = 0;
    for (const auto& [key, price] : models) {
        if (key.empty() || key.back() != '*')
            continue;
        const std::string prefix = key.substr(0, key.size() - 1);
        if (model.rfind(prefix, 0) == 0 && (prefix.size() >= bestLen || !best)) {
            best = price;
            bestLen = prefix.size();
        }
    }
    return best;
}

PriceTable priceTableFromJson(const json& j, const std::string& where)
{
    if (!j.is_object())
        throw InputError(
            where + ": expected an object of model -> {input, output[, cached_input]} (USD per 1M tokens)");
    PriceTable t;
    for (const auto& [model, v] : j.items()) {
        const std::string w = where + "." + model;
        if (!v.is_object())
            throw InputError(w + ": expected an object");
        ModelPrice p;
        for (const auto& [k, x] : v.items()) {
            if (!x.is_number() || x.get<double>() < 0)
                throw InputError(w + "." + k + ": expected a non-negative number");
            if (k == "input")
                p.inputPerMTok = x.get<double>();
            else if (k == "output")
                p.outputPerMTok = x.get<double>();
            else if (k == "cached_input")
                p.cachedInputPerMTok = x.get<double>();
            else
                throw InputError(w + "." + k + ": unknown field (expected input, output, cached_input)");
        }
        t.models[model] = p;
    }
    return t;
}

json toJson(const PriceTable& p)
{
    json j = json::object();
    for (const auto& [m, price] : p.models) {
        j[m] = { { "input", price.inputPerMTok }, { "output", price.outputPerMTok } };
        if (price.cachedInputPerMTok >= 0)
            j[m]["cached_input"] = price.cachedInputPerMTok;
    }
    return j;
}

// ---- presets and settings ---------------------------------------------------------------------------

namespace {

    ProviderSettings preset(const char* name, ApiKind api, const char* url, const char* keyEnv, bool keyRequired,
        const char* model, const char* maxTokensField = "max_tokens")
    {
        ProviderSettings s;
        s.name = name;
        s.api = api;
        s.baseUrl = url;
        s.apiKeyEnv = keyEnv;
        s.apiKeyRequired = keyRequired;
        s.model = model;
        s.maxTokensField = maxTokensField;
        return s;
    }

    std::vector<ProviderSettings> presets()
    {
        // Cloud models change too often to hard-code; the user names one (--model or settings).
        return {
            preset("openai", ApiKind::OpenAiChat, "https://api.openai.com/v1", "OPENAI_API_KEY", true, "",
                "max_completion_tokens"),
            preset(
                "anthropic", ApiKind::AnthropicMessages, "https://api.anthropic.com/v1", "ANTHROPIC_API_KEY", true, ""),
            preset("deepseek", ApiKind::OpenAiChat, "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", true,
                "deepseek-chat"),
            preset("openrouter", ApiKind::OpenAiChat, "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", true, ""),
            preset("vllm", ApiKind::OpenAiChat, "http://127.0.0.1:8000/v1", "VLLM_API_KEY", false, ""),
            preset("llamacpp", ApiKind::OpenAiChat, "http://127.0.0.1:8080/v1", "LLAMACPP_API_KEY", false, "default"),
            preset("ollama", ApiKind::OpenAiChat, "http://127.0.0.1:11434/v1", "OLLAMA_API_KEY", false, ""),
        };
    }

} // namespace

std::vector<std::string> providerPresetNames()
{
    std::vector<std::string> names;
    for (const auto& p : presets())
        names.push_back(p.name);
    return names;
}

ProviderSettings providerPreset(const std::string& name)
{
    for (auto& p : presets())
        if (p.name == name)
            return p;
    std::string known;
    for (const auto& n : providerPresetNames())
        known += (known.empty() ? "" : ", ") + n;
    throw InputError("unknown LLM provider '" + name + "' (known: " + known + ")");
}

json toJson(const ProviderSettings& s)
{
    json j = { { "name", s.name }, { "api", apiKindName(s.api) }, { "base_url", s.baseUrl }, { "model", s.model },
        { "api_key_env", s.apiKeyEnv }, { "api_key_required", s.apiKeyRequired }, { "stream", s.stream },
        { "stream_usage", s.streamUsage }, { "max_output_tokens", s.maxOutputTokens },
        { "max_tokens_field", s.maxTokensField }, { "connect_timeout_ms", s.connectTimeoutMs },
        { "read_timeout_ms", s.readTimeoutMs }, { "max_attempts", s.maxAttempts },
        { "backoff_base_ms", s.backoffBaseMs }, { "backoff_max_ms", s.backoffMaxMs },
        { "max_retry_after_ms", s.maxRetryAfterMs }, { "max_reply_bytes", s.maxReplyBytes },
        { "prices", toJson(s.prices) } };
    if (s.temperature)
        j["temperature"] = *s.temperature;
    return j;
}

ProviderSettings providerSettingsFromJson(const json& j, const std::string& where, ProviderSettings s)
{
    if (!j.is_object())
        throw InputError(where + ": expected an object");
    auto str = [&](const std::string& k, const json& v) {
        if (!v.is_string())
            throw InputError(where + "." + k + ": expected a string");
        return v.get<std::string>();
    };
    auto integer = [&](const std::string& k, const json& v, int lo, int hi) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
            throw InputError(
                where + "." + k + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return v.get<int>();
    };
    auto boolean = [&](const std::string& k, const json& v) {
        if (!v.is_boolean())
            throw InputError(where + "." + k + ": expected true or false");
        return v.get<bool>();
    };
    for (const auto& [k, v] : j.items()) {
        if (k == "name")
            s.name = str(k, v);
        else if (k == "api")
            s.api = apiKindFromName(str(k, v));
        else if (k == "base_url")
            s.baseUrl = str(k, v);
        else if (k == "model")
            s.model = str(k, v);
        else if (k == "api_key_env")
            s.apiKeyEnv = str(k, v);
        else if (k == "api_key_required")
            s.apiKeyRequired = boolean(k, v);
        else if (k == "stream")
            s.stream = boolean(k, v);
        else if (k == "stream_usage")
            s.streamUsage = boolean(k, v);
        else if (k == "max_output_tokens")
            s.maxOutputTokens = integer(k, v, 1, 10'000'000);
        else if (k == "max_tokens_field") {
            s.maxTokensField = str(k, v);
            if (s.maxTokensField != "max_tokens" && s.maxTokensField != "max_completion_tokens")
                throw InputError(where + ".max_tokens_field: expected \"max_tokens\" or \"max_completion_tokens\"");
        } else if (k == "temperature") {
            if (!v.is_number())
                throw InputError(where + ".temperature: expected a number");
            s.temperature = v.get<double>();
        } else if (k == "connect_timeout_ms")
            s.connectTimeoutMs = integer(k, v, 1, 3'600'000);
        else if (k == "read_timeout_ms")
            s.readTimeoutMs = integer(k, v, 1, 3'600'000);
        else if (k == "max_attempts")
            s.maxAttempts = integer(k, v, 1, 100);
        else if (k == "backoff_base_ms")
            s.backoffBaseMs = integer(k, v, 0, 3'600'000);
        else if (k == "backoff_max_ms")
            s.backoffMaxMs = integer(k, v, 0, 3'600'000);
        else if (k == "max_retry_after_ms")
            s.maxRetryAfterMs = integer(k, v, 0, 86'400'000);
        else if (k == "max_reply_bytes")
            s.maxReplyBytes = integer(k, v, 1024, 1 << 30);
        else if (k == "prices")
            s.prices = priceTableFromJson(v, where + ".prices");
        else if (k == "api_key")
            throw InputError(where
                + ".api_key: keys are never stored in settings; put the key in an environment "
                  "variable and name it in api_key_env");
        else
            throw InputError(where + "." + k + ": unknown field");
    }
    return s;
}

// ---- the client ---------------------------------------------------------------------------------------

namespace {

    using Clock = std::chrono::steady_clock;

    std::string truncated(const std::string& s, std::size_t n = 400)
    {
        return s.size() <= n ? s : s.substr(0, n) + "...";
    }

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

    // Accumulates one streamed or whole reply.
    struct ReplyState {
        std::string text;
        std::string model;
        std::string stopReason;
        Usage usage;
        bool done = false; // [DONE], message_stop, or a finish reason seen
        std::optional<LlmError> streamError;
    };

    std::int64_t intField(const json& j, const char* key)
    {
        if (j.is_object() && j.contains(key) && j[key].is_number_integer())
            return j[key].get<std::int64_t>();
        return 0;
    }

    void readOpenAiUsage(const json& u, Usage& usage)
    {
        if (!u.is_object())
            return;
        usage.reported = true;
        usage.inputTokens = intField(u, "prompt_tokens");
        usage.outputTokens = intField(u, "completion_tokens");
        if (u.contains("prompt_tokens_details"))
            usage.cachedInputTokens = intField(u["prompt_tokens_details"], "cached_tokens");
        else if (u.contains("prompt_cache_hit_tokens")) // DeepSeek
            usage.cachedInputTokens = intField(u, "prompt_cache_hit_tokens");
    }

    void readAnthropicUsage(const json& u, Usage& usage, bool start)
    {
        if (!u.is_object())
            return;
        usage.reported = true;
        if (start || u.contains("input_tokens")) {
            const auto cacheRead = intField(u, "cache_read_input_tokens");
            const auto cacheWrite = intField(u, "cache_creation_input_tokens");
            if (u.contains("input_tokens"))
                usage.inputTokens = intField(u, "input_tokens") + cacheRead + cacheWrite;
            usage.cachedInputTokens = cacheRead;
        }
        if (u.contains("output_tokens"))
            usage.outputTokens = intField(u, "output_tokens");
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

    void onOpenAiEvent(const SseEvent& ev, ReplyState& st, const StreamObserver& obs)
    {
        if (ev.data == "[DONE]") {
            st.done = true;
            return;
        }
        json j;
        try {
            j = json::parse(ev.data);
        } catch (const std::exception& e) {
            throw LlmError(LlmError::Kind::BadResponse,
                std::string("malformed JSON in a stream chunk: ") + e.what() + ": " + truncated(ev.data, 200));
        }
        if (j.contains("error")) {
            st.streamError = streamErrorFrom(j["error"]);
            return;
        }
        if (j.contains("model") && j["model"].is_string())
            st.model = j["model"].get<std::string>();
        if (j.contains("usage"))
            readOpenAiUsage(j["usage"], st.usage);
        if (!j.contains("choices") || !j["choices"].is_array())
            return;
        for (const auto& c : j["choices"]) {
            if (!c.is_object())
                continue;
            if (c.contains("delta") && c["delta"].is_object()) {
                const auto& d = c["delta"];
                if (d.contains("content") && d["content"].is_string()) {
                    const auto& delta = d["content"].get_ref<const std::string&>();
                    if (!delta.empty()) {
                        st.text += delta;
                        if (obs.onDelta)
                            obs.onDelta(delta);
                    }
                }
            }
            if (c.contains("finish_reason") && c["finish_reason"].is_string())
                st.stopReason = c["finish_reason"].get<std::string>();
        }
    }

    void onAnthropicEvent(const SseEvent& ev, ReplyState& st, const StreamObserver& obs)
    {
        json j;
        try {
            j = json::parse(ev.data);
        } catch (const std::exception& e) {
            throw LlmError(LlmError::Kind::BadResponse,
                std::string("malformed JSON in a stream event: ") + e.what() + ": " + truncated(ev.data, 200));
        }
        const std::string type = ev.event.empty() ? j.value("type", std::string()) : ev.event;
        if (type == "error") {
            st.streamError = streamErrorFrom(j.contains("error") ? j["error"] : j);
        } else if (type == "message_start" && j.contains("message")) {
            const auto& m = j["message"];
            if (m.contains("model") && m["model"].is_string())
                st.model = m["model"].get<std::string>();
            if (m.contains("usage"))
                readAnthropicUsage(m["usage"], st.usage, true);
        } else if (type == "content_block_delta" && j.contains("delta")) {
            const auto& d = j["delta"];
            if (d.value("type", std::string()) == "text_delta" && d.contains("text") && d["text"].is_string()) {
                const auto& delta = d["text"].get_ref<const std::string&>();
                st.text += delta;
                if (obs.onDelta && !delta.empty())
                    obs.onDelta(delta);
            }
        } else if (type == "message_delta") {
            if (j.contains("delta") && j["delta"].contains("stop_reason") && j["delta"]["stop_reason"].is_string())
                st.stopReason = j["delta"]["stop_reason"].get<std::string>();
            if (j.contains("usage"))
                readAnthropicUsage(j["usage"], st.usage, false);
        } else if (type == "message_stop") {
            st.done = true;
        }
    }

    void parseWholeReply(ApiKind api, const std::string& body, ReplyState& st)
    {
        json j;
        try {
            j = json::parse(body);
        } catch (const std::exception& e) {
            throw LlmError(LlmError::Kind::BadResponse,
                std::string("malformed JSON reply: ") + e.what() + ": " + truncated(body, 200));
        }
        if (!j.is_object())
            throw LlmError(LlmError::Kind::BadResponse, "reply is not a JSON object: " + truncated(body, 200));
        if (j.contains("error") && !j["error"].is_null())
            throw streamErrorFrom(j["error"]);
        if (j.contains("model") && j["model"].is_string())
            st.model = j["model"].get<std::string>();
        if (api == ApiKind::OpenAiChat) {
            if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()
                || !j["choices"][0].is_object() || !j["choices"][0].contains("message"))
                throw LlmError(LlmError::Kind::BadResponse, "reply has no choices[0].message: " + truncated(body, 200));
            const auto& c = j["choices"][0];
            const auto& m = c["message"];
            if (m.contains("content") && m["content"].is_string())
                st.text = m["content"].get<std::string>();
            else
                throw LlmError(LlmError::Kind::BadResponse, "choices[0].message.content is not a string");
            if (c.contains("finish_reason") && c["finish_reason"].is_string())
                st.stopReason = c["finish_reason"].get<std::string>();
            if (j.contains("usage"))
                readOpenAiUsage(j["usage"], st.usage);
        } else {
            if (!j.contains("content") || !j["content"].is_array())
                throw LlmError(LlmError::Kind::BadResponse, "reply has no content array: " + truncated(body, 200));
            for (const auto& block : j["content"])
                if (block.is_object() && block.value("type", std::string()) == "text" && block.contains("text")
                    && block["text"].is_string())
                    st.text += block["text"].get<std::string>();
            if (j.contains("stop_reason") && j["stop_reason"].is_string())
                st.stopReason = j["stop_reason"].get<std::string>();
            if (j.contains("usage"))
                readAnthropicUsage(j["usage"], st.usage, true);
        }
        st.done = true;
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
