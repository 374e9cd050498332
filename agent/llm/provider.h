#pragma once
// Chat-completion providers over HTTP: the OpenAI-compatible API (OpenAI, DeepSeek, OpenRouter, vLLM,
// llama.cpp server, Ollama) and the Anthropic Messages API. Streaming, retries, usage and cost.
// API keys come from the environment variable named in the settings at call time and are never
// stored in any structure that is recorded.
#include "core/agent_records.h"
#include "core/cancel.h"

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kl::llm {

enum class ApiKind { OpenAiChat, AnthropicMessages };
const char* apiKindName(ApiKind k); // "openai", "anthropic"
ApiKind apiKindFromName(const std::string& s); // throws InputError

// US dollars per million tokens.
struct ModelPrice {
    double inputPerMTok = 0;
    double outputPerMTok = 0;
    double cachedInputPerMTok = -1; // < 0: same as input
};

// Keyed by model name; a key ending in '*' matches by prefix ("gpt-4.1*").
struct PriceTable {
    std::map<std::string, ModelPrice> models;
    std::optional<ModelPrice> find(const std::string& model) const;
};
PriceTable priceTableFromJson(const nlohmann::json& j, const std::string& where); // throws InputError
nlohmann::json toJson(const PriceTable& p);

struct ProviderSettings {
    std::string name = "openai"; // preset name, shown in records and in the agent name
    ApiKind api = ApiKind::OpenAiChat;
    std::string baseUrl = "https://api.openai.com/v1"; // ".../chat/completions" or ".../messages" is appended
    std::string model;
    std::string apiKeyEnv = "OPENAI_API_KEY"; // the variable's name; empty: never send a key
    bool apiKeyRequired = true; // local servers: send the key only when the variable is set
    bool stream = true;
    bool streamUsage = true; // OpenAI-compatible: ask for usage in the last chunk (stream_options)
    int maxOutputTokens = 8192;
    // OpenAI's newer models refuse "max_tokens" and want "max_completion_tokens"; most compatible servers
    // still read "max_tokens". Anthropic always uses "max_tokens".
    std::string maxTokensField = "max_tokens";
    std::optional<double> temperature;
    int connectTimeoutMs = 10'000;
    int readTimeoutMs = 180'000; // silence allowed between two received bytes
    int maxAttempts = 5; // first try plus retries on 429, 5xx and dropped connections
    int backoffBaseMs = 1000;
    int backoffMaxMs = 60'000;
    int maxRetryAfterMs = 300'000; // a longer Retry-After fails the call instead of waiting
    // A reply (the raw body, streamed or not) past this is aborted: a misbehaving server cannot fill memory and
    // the journal. Replies are kernels of a few KiB.
    int maxReplyBytes = 1 << 20;
    PriceTable prices;
};

// Presets: openai, anthropic, deepseek, openrouter, vllm, llamacpp, ollama. Throws InputError for an
// unknown name, listing the known ones.
ProviderSettings providerPreset(const std::string& name);
std::vector<std::string> providerPresetNames();
// Settings as JSON (no secrets exist in them: only the name of the key's variable).
nlohmann::json toJson(const ProviderSettings& s);
// Overlays the fields present in j onto base; strict about types and unknown fields.
ProviderSettings providerSettingsFromJson(const nlohmann::json& j, const std::string& where, ProviderSettings base);

struct ChatMessage {
    std::string role; // "user" or "assistant"
    std::string content;
};

struct ChatRequest {
    std::string system;
    std::vector<ChatMessage> messages;
};

using Usage = LlmUsage; // core/agent_records.h: the journal's llm.reply records carry it

struct ChatReply {
    std::string text;
    std::string model; // as the server reported it
    std::string stopReason;
    Usage usage;
    int attempts = 1;
    double elapsedMs = 0;
};

class LlmError : public std::runtime_error {
public:
    enum class Kind {
        Config,
        Auth,
        ModelNotFound,
        RateLimited,
        Server,
        Network,
        Timeout,
        Cancelled,
        BadResponse,
        BadRequest,
        ReplyTooLarge
    };
    LlmError(Kind kind, const std::string& message, int httpStatus = 0)
        : std::runtime_error(message)
        , m_kind(kind)
        , m_status(httpStatus)
    {
    }
    Kind kind() const { return m_kind; }
    int httpStatus() const { return m_status; }

private:
    Kind m_kind;
    int m_status;
};
const char* llmErrorKindName(LlmError::Kind k);

// What the caller sees while a call runs: text deltas as they arrive, and a note before each retry
// (the text shown so far is void after a retry).
struct StreamObserver {
    std::function<void(const std::string& delta)> onDelta;
    std::function<void(int nextAttempt, int delayMs, const std::string& why)> onRetry;
};

class LlmClient {
public:
    explicit LlmClient(ProviderSettings s);
    const ProviderSettings& settings() const { return m_settings; }
    // Throws LlmError (Config) when a call could not even start: no model, no base URL, no key in the environment.
    // Returns the key (empty when none is needed); callers check this before spending anything else.
    std::string checkConfig() const;
    // Blocks until the reply is complete. Throws LlmError.
    ChatReply complete(const ChatRequest& req, const StreamObserver& obs, const CancelToken& cancel) const;

    // Exposed for tests.
    nlohmann::json requestBody(const ChatRequest& req) const;
    std::string endpoint() const;
    static std::optional<int> parseRetryAfterMs(const std::string& value, std::int64_t nowEpochSec);

private:
    ProviderSettings m_settings;
};

} // namespace kl::llm
