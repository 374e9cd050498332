// The OpenAI chat-completions format (also DeepSeek, OpenRouter, vLLM, Ollama ...): usage, stream chunks, whole
// replies.
#include "agent/llm/reply_wire.h"

namespace kl::llm {

using nlohmann::json;

namespace {

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

} // namespace

void onOpenAiEvent(const SseEvent& ev, ReplyState& st, const StreamObserver& obs)
{
    if (ev.data == "[DONE]") {
        st.done = true;
        return;
    }
    json j = parseReplyJson(ev.data, "in a stream chunk");
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

void readOpenAiReply(const json& j, const std::string& body, ReplyState& st)
{
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() || !j["choices"][0].is_object()
        || !j["choices"][0].contains("message"))
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
}

} // namespace kl::llm
