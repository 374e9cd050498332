// Providers as settings: API kinds, the presets, settings and price tables with their JSON forms, error kinds.
#include "agent/llm/provider.h"

#include "core/errors.h"

#include <algorithm>

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

} // namespace kl::llm
