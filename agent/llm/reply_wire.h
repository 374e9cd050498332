#pragma once
// Reading one reply in the two wire formats (OpenAI chat completions, Anthropic messages), streamed as server-sent
// events or whole: openai_api.cpp and anthropic_api.cpp hold each format, llm_client.cpp what they share.
#include "agent/llm/provider.h"
#include "agent/llm/sse.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kl::llm {

// Accumulates one streamed or whole reply.
struct ReplyState {
    std::string text;
    std::string model;
    std::string stopReason;
    Usage usage;
    bool done = false; // [DONE], message_stop, or a finish reason seen
    std::optional<LlmError> streamError;
};

std::string truncated(const std::string& s, std::size_t n = 400);
std::int64_t intField(const nlohmann::json& j, const char* key);
// Throws BadResponse "malformed JSON <what>: ..." for text that does not parse.
nlohmann::json parseReplyJson(const std::string& text, const char* what);
// An error object in a reply or its stream; overload, server and rate-limit errors are transient (Server).
LlmError streamErrorFrom(const nlohmann::json& e);
// A whole (not streamed) reply of either format.
void parseWholeReply(ApiKind api, const std::string& body, ReplyState& st);

void onOpenAiEvent(const SseEvent& ev, ReplyState& st, const StreamObserver& obs);
// The format's part of a whole reply `j` (its text `body`, for messages).
void readOpenAiReply(const nlohmann::json& j, const std::string& body, ReplyState& st);

void onAnthropicEvent(const SseEvent& ev, ReplyState& st, const StreamObserver& obs);
void readAnthropicReply(const nlohmann::json& j, const std::string& body, ReplyState& st);

} // namespace kl::llm
