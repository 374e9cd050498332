// Anthropic's messages format: usage, stream events, whole replies.
#include "agent/llm/reply_wire.h"

namespace kl::llm {

using nlohmann::json;

namespace {

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

} // namespace

void onAnthropicEvent(const SseEvent& ev, ReplyState& st, const StreamObserver& obs)
{
    json j = parseReplyJson(ev.data, "in a stream event");
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

void readAnthropicReply(const json& j, const std::string& body, ReplyState& st)
{
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

} // namespace kl::llm
