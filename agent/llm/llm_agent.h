#pragma once
// The LLM agent: builds the prompt from the session (agent/prompt/), asks the provider, parses the
// reply strictly and returns one proposal per call. Replies that cannot be used are recorded and
// answered with the error, a bounded number of times. Every prompt, reply, token count, cost and
// verdict goes to the record callback (the loop forwards it to SessionStore::agentMessage); API keys
// never do.
#include "agent/llm/provider.h"
#include "agent/prompt/prompt_builder.h"
#include "core/agent.h"
#include "core/events.h"
#include "core/live_agent_stream.h"

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kl {

struct LlmAgentSettings {
    llm::ProviderSettings provider;
    std::vector<std::filesystem::path> contextDirs; // read after the shipped and user roots
    bool defaultContextRoots = true; // false: only contextDirs (tests)
    std::string arch; // "sm_90": used when the session has no device
    bool autoApprove = false; // proposals skip the engineer's review
    int maxReplyAttempts = 3; // per propose(): the first reply plus corrections after unusable ones
    int maxFailuresInPrompt = 6;
    int maxOutstanding = 1; // no new call while this many of our candidates are not yet decided
    KernelLanguage language = KernelLanguage::Cuda; // settings "language" (kloop run --language)
};

struct LlmAgentHooks {
    std::function<void(const nlohmann::json& record)> record; // -> SessionStore::agentMessage
    std::function<void(const std::string& delta)> onDelta; // live text for the GUI
    std::function<void(int nextAttempt, int delayMs, const std::string& why)> onRetry;
};

class LlmAgent : public Agent {
public:
    LlmAgent(LlmAgentSettings settings, LlmAgentHooks hooks);
    std::string name() const override;
    std::vector<Proposal> propose(const AgentContext& ctx, const CancelToken& cancel) override;
    void observe(const Candidate& c, const Evaluation& e) override;

    llm::Usage sessionUsage() const;
    int calls() const;
    // The prompt propose() would send now (kloop prompt, tests).
    prompt::Prompt buildPrompt(const AgentContext& ctx) const;

private:
    void record(nlohmann::json j) const;
    // An attempt whose reply cannot be used: journaled (bounded) and shown to the model in later prompts.
    void rejectAttempt(
        int call, int attempt, const AgentContext& ctx, const std::string& kind, const std::string& message);

    LlmAgentSettings m_settings;
    LlmAgentHooks m_hooks;
    llm::LlmClient m_client;
    mutable std::mutex m_mutex;
    llm::Usage m_usage;
    int m_calls = 0;
    std::vector<prompt::FailedAttempt> m_replyFailures; // unusable replies: not in the session tree
    mutable std::string m_lastSystemHash;
};

std::unique_ptr<Agent> makeLlmAgent(const LlmAgentSettings& settings, LlmAgentHooks hooks = {});

// kloop run's hooks: each record goes through the live stream writer (which names the stream in llm.request,
// llm.reply and llm.error records) and then to `record`; streamed text and retries go to the writer
// (<session>/live/agent-stream.jsonl, core/live_agent_stream.h), so a workbench sees the reply as it streams.
// `live` returns null while there is no session yet; then records only go to `record`.
LlmAgentHooks liveStreamingHooks(
    std::function<void(const nlohmann::json& record)> record, std::function<LiveStreamWriter*()> live);

// Settings for "llm:<provider>" from the provider preset, overlaid with the session's extra settings:
//   llm.model, llm.base_url, llm.api_key_env, llm.api ("openai"|"anthropic"), llm.arch,
//   llm.auto_approve ("true"/"false"), llm.context_dirs (colon-separated),
//   llm.settings (a JSON object of provider fields, prices included), llm.settings_file (a JSON file of the same).
// Throws InputError for an unknown provider or a bad value.
LlmAgentSettings llmAgentSettingsFor(const std::string& agentSpec, const std::map<std::string, std::string>& extra);

// Token usage and cost of all LLM calls recorded in a session's events (llm.reply records), for
// summaries that survive restarts (the agent's own counter covers only its lifetime).
llm::Usage llmUsageFromEvents(const std::vector<Event>& events, int* calls = nullptr);

// The prompt inputs for a problem outside a session (kloop prompt): context roots, reference source.
// language Triton also selects the context pages tagged "language-triton".
prompt::PromptInputs promptInputsFor(const Problem& problem, const DeviceInfo& device,
    const std::vector<std::filesystem::path>& contextRoots, KernelLanguage language = KernelLanguage::Cuda);

} // namespace kl
