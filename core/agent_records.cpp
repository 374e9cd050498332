#include "core/agent_records.h"

#include "core/json_io.h"

#include <type_traits>

namespace kl {

using json = nlohmann::json;

namespace {

    bool present(const json& j, const char* key)
    {
        const auto it = j.find(key);
        return it != j.end() && !it->is_null();
    }

    // Reads key into out when present; false when present with another type.
    template <typename T> bool read(const json& j, const char* key, T& out)
    {
        const auto it = j.find(key);
        if (it == j.end() || it->is_null())
            return true;
        if constexpr (std::is_same_v<T, std::string>) {
            if (!it->is_string())
                return false;
        } else if constexpr (std::is_same_v<T, bool>) {
            if (!it->is_boolean())
                return false;
        } else {
            if (!it->is_number())
                return false;
        }
        out = it->get<T>();
        return true;
    }

    std::optional<LlmUsage> usageOf(const json& j, const char* key, bool& ok)
    {
        if (!present(j, key))
            return std::nullopt;
        const auto it = j.find(key);
        if (!it->is_object()) {
            ok = false;
            return std::nullopt;
        }
        LlmUsage u;
        ok = ok && read(*it, "input_tokens", u.inputTokens) && read(*it, "cached_input_tokens", u.cachedInputTokens)
            && read(*it, "output_tokens", u.outputTokens) && read(*it, "cost_usd", u.costUsd)
            && read(*it, "reported", u.reported) && read(*it, "priced", u.priced);
        return u;
    }

    bool isRecord(const json& data, const char* type)
    {
        return agentRecordType(data) == type;
    }

} // namespace

LlmUsage& LlmUsage::operator+=(const LlmUsage& o)
{
    inputTokens += o.inputTokens;
    cachedInputTokens += o.cachedInputTokens;
    outputTokens += o.outputTokens;
    costUsd += o.costUsd;
    reported = reported || o.reported;
    priced = priced || o.priced;
    return *this;
}

std::string agentRecordType(const json& data)
{
    if (!data.is_object())
        return {};
    const auto it = data.find("type");
    return it != data.end() && it->is_string() ? it->get<std::string>() : std::string();
}

json toJson(const LlmUsage& u)
{
    return { { "input_tokens", u.inputTokens }, { "cached_input_tokens", u.cachedInputTokens },
        { "output_tokens", u.outputTokens }, { "cost_usd", u.costUsd }, { "reported", u.reported },
        { "priced", u.priced } };
}

json toJson(const LlmRequestRecord& r)
{
    json j = { { "type", kLlmRequestType }, { "call", r.call }, { "reply_attempt", r.replyAttempt },
        { "provider", r.provider }, { "api", r.api }, { "base_url", r.baseUrl }, { "model", r.model },
        { "base_candidate", r.baseCandidate }, { "hypothesis", r.hypothesis }, { "system_sha256", r.systemSha256 },
        { "messages", r.messages } };
    if (r.system)
        j["system"] = *r.system;
    if (!r.liveStream.empty())
        j[kLiveStreamKey] = r.liveStream;
    return j;
}

json toJson(const LlmReplyRecord& r)
{
    json j = { { "type", kLlmReplyType }, { "call", r.call }, { "reply_attempt", r.replyAttempt }, { "model", r.model },
        { "text", r.text }, { "stop_reason", r.stopReason }, { "http_attempts", r.httpAttempts },
        { "session_calls", r.sessionCalls } };
    if (r.elapsedMs)
        j["elapsed_ms"] = *r.elapsedMs;
    if (r.usage)
        j["usage"] = toJson(*r.usage);
    if (r.sessionUsage)
        j["session_usage"] = toJson(*r.sessionUsage);
    if (!r.liveStream.empty())
        j[kLiveStreamKey] = r.liveStream;
    return j;
}

std::optional<LlmRequestRecord> llmRequestRecord(const json& data)
{
    if (!isRecord(data, kLlmRequestType))
        return std::nullopt;
    LlmRequestRecord r;
    std::string system;
    bool ok = read(data, "call", r.call) && read(data, "reply_attempt", r.replyAttempt)
        && read(data, "provider", r.provider) && read(data, "api", r.api) && read(data, "base_url", r.baseUrl)
        && read(data, "model", r.model) && read(data, "base_candidate", r.baseCandidate)
        && read(data, "hypothesis", r.hypothesis) && read(data, "system_sha256", r.systemSha256)
        && read(data, kLiveStreamKey, r.liveStream) && read(data, "system", system);
    if (present(data, "system"))
        r.system = system;
    if (const auto it = data.find("messages"); it != data.end())
        r.messages = *it;
    if (!ok)
        return std::nullopt;
    return r;
}

std::optional<LlmReplyRecord> llmReplyRecord(const json& data)
{
    if (!isRecord(data, kLlmReplyType))
        return std::nullopt;
    LlmReplyRecord r;
    double elapsed = -1;
    bool ok = read(data, "call", r.call) && read(data, "reply_attempt", r.replyAttempt) && read(data, "model", r.model)
        && read(data, "text", r.text) && read(data, "stop_reason", r.stopReason)
        && read(data, "http_attempts", r.httpAttempts) && read(data, "session_calls", r.sessionCalls)
        && read(data, kLiveStreamKey, r.liveStream) && read(data, "elapsed_ms", elapsed);
    if (present(data, "elapsed_ms"))
        r.elapsedMs = elapsed;
    r.usage = usageOf(data, "usage", ok);
    r.sessionUsage = usageOf(data, "session_usage", ok);
    if (!ok)
        return std::nullopt;
    return r;
}

json toJson(const LlmErrorRecord& r)
{
    json j = { { "type", kLlmErrorType }, { "call", r.call }, { "kind", r.kind }, { "http_status", r.httpStatus },
        { "message", r.message } };
    if (!r.liveStream.empty())
        j[kLiveStreamKey] = r.liveStream;
    return j;
}

json toJson(const LlmRetryRecord& r)
{
    return { { "type", kLlmRetryType }, { "call", r.call }, { "next_attempt", r.nextAttempt },
        { "delay_ms", r.delayMs }, { "why", r.why } };
}

json toJson(const LlmReplyRejectedRecord& r)
{
    return { { "type", kLlmReplyRejectedType }, { "call", r.call }, { "reply_attempt", r.replyAttempt },
        { "kind", r.kind }, { "message", r.message } };
}

json toJson(const LlmProposalRecord& r)
{
    return { { "type", kLlmProposalType }, { "call", r.call }, { "form", r.form },
        { "base_candidate", r.baseCandidate }, { "source_sha256", r.sourceSha256 }, { "params", r.params },
        { "needs_review", r.needsReview }, { "note", r.note } };
}

json toJson(const LlmVerdictRecord& r)
{
    json reasons = json::array();
    for (const auto& reason : r.reasons)
        reasons.push_back(toJson(reason));
    return { { "type", kLlmVerdictType }, { "candidate", r.candidate }, { "source_sha256", r.sourceSha256 },
        { "verdict", r.verdict }, { "objective", r.objective }, { "reasons", reasons } };
}

std::optional<LlmErrorRecord> llmErrorRecord(const json& data)
{
    LlmErrorRecord r;
    if (!isRecord(data, kLlmErrorType)
        || !(read(data, "call", r.call) && read(data, "kind", r.kind) && read(data, "http_status", r.httpStatus)
            && read(data, "message", r.message) && read(data, kLiveStreamKey, r.liveStream)))
        return std::nullopt;
    return r;
}

std::optional<LlmRetryRecord> llmRetryRecord(const json& data)
{
    LlmRetryRecord r;
    if (!isRecord(data, kLlmRetryType)
        || !(read(data, "call", r.call) && read(data, "next_attempt", r.nextAttempt)
            && read(data, "delay_ms", r.delayMs) && read(data, "why", r.why)))
        return std::nullopt;
    return r;
}

std::optional<LlmReplyRejectedRecord> llmReplyRejectedRecord(const json& data)
{
    LlmReplyRejectedRecord r;
    if (!isRecord(data, kLlmReplyRejectedType)
        || !(read(data, "call", r.call) && read(data, "reply_attempt", r.replyAttempt) && read(data, "kind", r.kind)
            && read(data, "message", r.message)))
        return std::nullopt;
    return r;
}

std::optional<LlmProposalRecord> llmProposalRecord(const json& data)
{
    LlmProposalRecord r;
    if (!isRecord(data, kLlmProposalType)
        || !(read(data, "call", r.call) && read(data, "form", r.form) && read(data, "base_candidate", r.baseCandidate)
            && read(data, "source_sha256", r.sourceSha256) && read(data, "needs_review", r.needsReview)
            && read(data, "note", r.note)))
        return std::nullopt;
    if (const auto it = data.find("params"); it != data.end() && !it->is_null()) {
        if (!it->is_object())
            return std::nullopt;
        for (const auto& [name, value] : it->items()) {
            if (!value.is_number_integer())
                return std::nullopt;
            r.params[name] = value.get<std::int64_t>();
        }
    }
    return r;
}

std::optional<LlmVerdictRecord> llmVerdictRecord(const json& data)
{
    LlmVerdictRecord r;
    if (!isRecord(data, kLlmVerdictType)
        || !(read(data, "candidate", r.candidate) && read(data, "source_sha256", r.sourceSha256)
            && read(data, "verdict", r.verdict) && read(data, "objective", r.objective)))
        return std::nullopt;
    if (const auto it = data.find("reasons"); it != data.end() && !it->is_null()) {
        if (!it->is_array())
            return std::nullopt;
        try {
            for (const auto& reason : *it)
                r.reasons.push_back(reasonFromJson(reason, std::string(kLlmVerdictType) + ".reasons"));
        } catch (const std::exception&) {
            return std::nullopt;
        }
    }
    return r;
}

} // namespace kl
