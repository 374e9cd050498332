#pragma once
// The LLM agent's journal records (AgentMessage events whose data carries "type"), typed: agent/llm writes them;
// the live-stream writer (core/live_agent_stream.h), the usage total, the tests and the workbench's console read
// them. The type and key names live here only. Readers are lenient about missing keys (older journals) and return
// nullopt for data of another type or of an unexpected shape, which then is shown raw and has no live view.
#include "core/evaluation.h"
#include "core/kernel_spec.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kl {

inline constexpr const char* kLlmRequestType = "llm.request";
inline constexpr const char* kLlmReplyType = "llm.reply";
inline constexpr const char* kLlmErrorType = "llm.error";
inline constexpr const char* kLlmRetryType = "llm.retry";
inline constexpr const char* kLlmReplyRejectedType = "llm.reply-rejected";
inline constexpr const char* kLlmProposalType = "llm.proposal";
inline constexpr const char* kLlmVerdictType = "llm.verdict";
inline constexpr const char* kLiveStreamKey = "live_stream"; // in llm.request, llm.reply and llm.error

// Token use and cost of one reply or summed over a session.
struct LlmUsage {
    std::int64_t inputTokens = 0; // including cached
    std::int64_t cachedInputTokens = 0;
    std::int64_t outputTokens = 0;
    double costUsd = 0;
    bool reported = false; // the provider sent usage numbers
    bool priced = false; // a price was known for the model
    LlmUsage& operator+=(const LlmUsage& o);
};

// One attempt of one call, before it is sent.
struct LlmRequestRecord {
    int call = 0;
    int replyAttempt = 1;
    std::string provider;
    std::string api;
    std::string baseUrl; // without its query
    std::string model;
    std::string baseCandidate; // "" when the template or nothing
    std::string hypothesis;
    std::string systemSha256;
    std::optional<std::string> system; // journaled once per change; its hash always
    nlohmann::json messages = nlohmann::json::array();
    std::string liveStream; // the live view's stream, named by the writer of the live file
};

struct LlmReplyRecord {
    int call = 0;
    int replyAttempt = 1;
    std::string model; // as the server reported it
    std::string text;
    std::string stopReason;
    int httpAttempts = 0;
    std::optional<double> elapsedMs;
    std::optional<LlmUsage> usage;
    std::optional<LlmUsage> sessionUsage; // the run's total after this reply
    int sessionCalls = 0;
    std::string liveStream;
};

// A call that failed for good (or a reply too large), with the client's error kind.
struct LlmErrorRecord {
    int call = 0;
    std::string kind; // llm::llmErrorKindName
    int httpStatus = 0;
    std::string message;
    std::string liveStream;
};

// The client waits and tries the call again.
struct LlmRetryRecord {
    int call = 0;
    int nextAttempt = 0;
    int delayMs = 0;
    std::string why;
};

// A reply that could not be used (no candidate in it, a flood): the model is told and asked again.
struct LlmReplyRejectedRecord {
    int call = 0;
    int replyAttempt = 1;
    std::string kind;
    std::string message;
};

struct LlmProposalRecord {
    int call = 0;
    std::string form; // "candidate" | "diff"
    std::string baseCandidate;
    std::string sourceSha256;
    ParamValues params;
    bool needsReview = false;
    std::string note;
};

// What the loop decided about one of the agent's candidates.
struct LlmVerdictRecord {
    std::string candidate;
    std::string sourceSha256;
    std::string verdict; // verdictName
    double objective = 0;
    std::vector<VerdictReason> reasons;
};

nlohmann::json toJson(const LlmUsage& u);
nlohmann::json toJson(const LlmRequestRecord& r);
nlohmann::json toJson(const LlmReplyRecord& r);
nlohmann::json toJson(const LlmErrorRecord& r);
nlohmann::json toJson(const LlmRetryRecord& r);
nlohmann::json toJson(const LlmReplyRejectedRecord& r);
nlohmann::json toJson(const LlmProposalRecord& r);
nlohmann::json toJson(const LlmVerdictRecord& r);
std::optional<LlmRequestRecord> llmRequestRecord(const nlohmann::json& data);
std::optional<LlmReplyRecord> llmReplyRecord(const nlohmann::json& data);
std::optional<LlmErrorRecord> llmErrorRecord(const nlohmann::json& data);
std::optional<LlmRetryRecord> llmRetryRecord(const nlohmann::json& data);
std::optional<LlmReplyRejectedRecord> llmReplyRejectedRecord(const nlohmann::json& data);
std::optional<LlmProposalRecord> llmProposalRecord(const nlohmann::json& data);
std::optional<LlmVerdictRecord> llmVerdictRecord(const nlohmann::json& data);

// The record's "type" ("" when there is none).
std::string agentRecordType(const nlohmann::json& data);

} // namespace kl
