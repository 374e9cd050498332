#include "agent/llm/llm_agent.h"

#include "agent/prompt/reply_parser.h"
#include "core/errors.h"
#include "core/events.h"
#include "core/kernel_spec.h"
#include "core/session_store.h"

#include <algorithm>
#include <sstream>

namespace fs = std::filesystem;

namespace kl {

using nlohmann::json;

namespace {

    bool isOpen(CandidateStatus s)
    {
        return s == CandidateStatus::Proposed || s == CandidateStatus::PendingReview || s == CandidateStatus::Approved
            || s == CandidateStatus::Compiling || s == CandidateStatus::Verifying || s == CandidateStatus::Timing;
    }

    // Error texts are journaled and sent back to the model: bounded whatever the reply contained.
    std::string bounded(const std::string& text, std::size_t max = 4096)
    {
        return text.size() <= max ? text : text.substr(0, max) + "... (" + std::to_string(text.size()) + " bytes)";
    }

    std::string readOptional(const fs::path& p)
    {
        std::error_code ec;
        if (p.empty() || !fs::is_regular_file(p, ec))
            return {};
        try {
            return readFile(p, 1u << 20);
        } catch (const std::exception&) {
            return {};
        }
    }

    // The tuner may have moved the base away from its defaults. A parameter whose declaration the model left
    // as it was keeps the base's value; one it redeclared takes its new default (that was the model's intent).
    ParamValues inheritParams(const KernelSpec& spec, const std::optional<Candidate>& base)
    {
        ParamValues values = spec.defaults();
        if (!base || base->params.empty())
            return values;
        KernelSpec baseSpec;
        try {
            baseSpec = parseKernelSpec(base->source);
        } catch (const InputError&) {
            return values;
        }
        ParamValues inherited = values;
        for (const auto& ps : spec.params) {
            const ParamSpec* old = baseSpec.param(ps.name);
            const auto chosen = base->params.find(ps.name);
            if (old && chosen != base->params.end() && old->defaultValue == ps.defaultValue && old->values == ps.values)
                inherited[ps.name] = chosen->second;
        }
        return spec.satisfies(inherited, {}) ? inherited : values;
    }

} // namespace

prompt::PromptInputs promptInputsFor(const Problem& problem, const DeviceInfo& device,
    const std::vector<fs::path>& contextRoots, KernelLanguage language)
{
    prompt::PromptInputs in;
    in.problem = &problem;
    in.device = device;
    in.language = language;
    const auto docs = prompt::loadContextDocs(contextRoots);
    std::vector<std::string> tags = problem.tags;
    if (language == KernelLanguage::Triton)
        tags.push_back("language-triton");
    in.context = prompt::selectContext(docs, prompt::archNumber(device), tags);
    if (!problem.folder.empty() && !problem.referenceFile.empty())
        in.referenceSource = readOptional(fs::path(problem.folder) / problem.referenceFile);
    return in;
}

LlmAgent::LlmAgent(LlmAgentSettings settings, LlmAgentHooks hooks)
    : m_settings(std::move(settings))
    , m_hooks(std::move(hooks))
    , m_client(m_settings.provider)
{
}

std::string LlmAgent::name() const
{
    return "llm:" + m_settings.provider.name;
}

llm::Usage LlmAgent::sessionUsage() const
{
    std::lock_guard lock(m_mutex);
    return m_usage;
}

int LlmAgent::calls() const
{
    std::lock_guard lock(m_mutex);
    return m_calls;
}

void LlmAgent::record(json j) const
{
    j["agent"] = name();
    j["time_ms"] = nowMs();
    if (m_hooks.record)
        m_hooks.record(j);
}

prompt::Prompt LlmAgent::buildPrompt(const AgentContext& ctx) const
{
    DeviceInfo device;
    if (ctx.session && !ctx.session->device.empty())
        device = ctx.session->device;
    else
        device.arch = m_settings.arch;
    std::vector<fs::path> roots
        = m_settings.defaultContextRoots ? prompt::contextRoots(m_settings.contextDirs) : m_settings.contextDirs;
    static const Problem kNoProblem;
    prompt::PromptInputs in
        = promptInputsFor(ctx.problem ? *ctx.problem : kNoProblem, device, roots, m_settings.language);
    if (!ctx.problem)
        in.problem = nullptr;
    in.maxFailures = m_settings.maxFailuresInPrompt;
    prompt::fillFromSession(in, ctx);
    if (ctx.session)
        in.failures = prompt::failuresFromSession(*ctx.session, std::size_t(m_settings.maxFailuresInPrompt));
    {
        std::lock_guard lock(m_mutex);
        in.failures.insert(in.failures.end(), m_replyFailures.begin(), m_replyFailures.end());
    }
    std::stable_sort(in.failures.begin(), in.failures.end(),
        [](const prompt::FailedAttempt& a, const prompt::FailedAttempt& b) { return a.timeMs < b.timeMs; });
    return prompt::buildPrompt(in);
}

std::vector<Proposal> LlmAgent::propose(const AgentContext& ctx, const CancelToken& cancel)
{
    if (ctx.session) {
        int open = 0;
        for (const auto& id : ctx.session->tree.order()) {
            const Candidate& c = ctx.session->tree.at(id);
            if (c.author == Author::Llm && c.agent.rfind(name(), 0) == 0 && isOpen(c.status))
                ++open;
        }
        // One call per decided candidate: the model learns from each verdict, and nothing is spent on
        // proposals that queue behind an unreviewed one.
        if (open >= m_settings.maxOutstanding)
            return {};
    }

    const prompt::Prompt prompt = buildPrompt(ctx);
    std::optional<Candidate> base;
    if (ctx.session) {
        CandidateId baseId = ctx.branchFrom.empty() ? ctx.session->tree.head() : ctx.branchFrom;
        if (!baseId.empty() && ctx.session->tree.contains(baseId))
            base = ctx.session->tree.at(baseId);
    }
    const bool baseIsTemplate = !base && ctx.problem && (!ctx.session || ctx.session->tree.empty());
    if (baseIsTemplate)
        base = prompt::templateCandidate(*ctx.problem);

    int call;
    {
        std::lock_guard lock(m_mutex);
        call = ++m_calls;
    }
    llm::ChatRequest req;
    req.system = prompt.system();
    req.messages.push_back({ "user", prompt.user() });
    llm::StreamObserver obs;
    obs.onDelta = m_hooks.onDelta;
    obs.onRetry = [&](int next, int delayMs, const std::string& why) {
        record(toJson(LlmRetryRecord { call, next, delayMs, why }));
        if (m_hooks.onRetry)
            m_hooks.onRetry(next, delayMs, why);
    };

    const int attempts = std::max(1, m_settings.maxReplyAttempts);
    for (int attempt = 1; attempt <= attempts; ++attempt) {
        LlmRequestRecord request;
        request.call = call;
        request.replyAttempt = attempt;
        request.provider = m_settings.provider.name;
        request.api = llm::apiKindName(m_settings.provider.api);
        request.baseUrl = m_settings.provider.baseUrl.substr(0, m_settings.provider.baseUrl.find('?'));
        request.model = m_settings.provider.model;
        request.baseCandidate = base ? base->id : "";
        request.hypothesis = ctx.hypothesis ? ctx.hypothesis->id : "";
        request.systemSha256 = sha256Hex(req.system);
        if (request.systemSha256 != m_lastSystemHash) {
            request.system = req.system; // the stable part is journaled once per change
            m_lastSystemHash = request.systemSha256;
        }
        // An earlier reply of this call is journaled once, in its llm.reply record: here it is named, not repeated.
        int replyIndex = 0;
        for (const auto& m : req.messages)
            if (m.role == "assistant")
                request.messages.push_back({ { "role", m.role }, { "reply_attempt", ++replyIndex },
                    { "content_sha256", sha256Hex(m.content) }, { "bytes", m.content.size() } });
            else
                request.messages.push_back({ { "role", m.role }, { "content", m.content } });
        record(toJson(request));

        llm::ChatReply reply;
        try {
            reply = m_client.complete(req, obs, cancel);
        } catch (const llm::LlmError& e) {
            record(toJson(LlmErrorRecord { call, llm::llmErrorKindName(e.kind()), e.httpStatus(), e.what(), {} }));
            if (e.kind() != llm::LlmError::Kind::ReplyTooLarge)
                throw;
            // A flood is a failed attempt of this call, like an unusable reply: recorded, and the model told.
            rejectAttempt(call, attempt, ctx, llm::llmErrorKindName(e.kind()), e.what());
            req.messages.push_back({ "assistant", "(reply omitted: it was too long)" });
            req.messages.push_back({ "user",
                std::string("Your reply was cut off: ") + e.what()
                    + "\nReply again with a much shorter answer: exactly one ```kl-candidate or ```kl-diff block." });
            continue;
        }
        llm::Usage total;
        {
            std::lock_guard lock(m_mutex);
            m_usage += reply.usage;
            total = m_usage;
        }
        LlmReplyRecord replied;
        replied.call = call;
        replied.replyAttempt = attempt;
        replied.model = reply.model;
        replied.text = reply.text;
        replied.stopReason = reply.stopReason;
        replied.httpAttempts = reply.attempts;
        replied.elapsedMs = reply.elapsedMs;
        replied.usage = reply.usage;
        replied.sessionUsage = total;
        replied.sessionCalls = call;
        record(toJson(replied));

        try {
            prompt::ParsedReply parsed = prompt::parseReply(reply.text, base ? &base->source : nullptr);
            Proposal p;
            p.candidate.source = parsed.source;
            p.candidate.params = inheritParams(parsed.spec, base);
            p.candidate.parentId = base && !baseIsTemplate ? base->id : CandidateId();
            p.candidate.author = Author::Llm;
            p.candidate.agent = name() + "/" + m_settings.provider.model;
            p.candidate.hypothesisId = ctx.hypothesis ? ctx.hypothesis->id : HypothesisId();
            p.candidate.createdMs = nowMs();
            p.needsReview = !m_settings.autoApprove;
            p.note = parsed.note.empty() ? std::string("(the model gave no NOTE)") : parsed.note;
            record(
                toJson(LlmProposalRecord { call, parsed.kind == prompt::ParsedReply::Kind::Diff ? "diff" : "candidate",
                    p.candidate.parentId, sha256Hex(p.candidate.source), p.candidate.params, p.needsReview, p.note }));
            return { p };
        } catch (const prompt::ReplyError& e) {
            rejectAttempt(call, attempt, ctx, e.kind(), e.what());
            req.messages.push_back({ "assistant", reply.text });
            req.messages.push_back({ "user",
                std::string("Your reply could not be used: ") + bounded(e.what())
                    + "\nReply again, following the reply protocol: exactly one "
                      "```kl-candidate or ```kl-diff block." });
        }
    }
    return {};
}

void LlmAgent::rejectAttempt(
    int call, int attempt, const AgentContext& ctx, const std::string& kind, const std::string& message)
{
    record(toJson(LlmReplyRejectedRecord { call, attempt, kind, bounded(message) }));
    prompt::FailedAttempt f;
    f.label = "reply " + std::to_string(attempt) + " of call " + std::to_string(call);
    f.kind = kind;
    f.hypothesis = ctx.hypothesis ? ctx.hypothesis->text : "";
    f.detail = bounded(message);
    f.timeMs = nowMs();
    std::lock_guard lock(m_mutex);
    m_replyFailures.push_back(f);
    if (m_replyFailures.size() > 20)
        m_replyFailures.erase(m_replyFailures.begin());
}

void LlmAgent::observe(const Candidate& c, const Evaluation& e)
{
    if (c.author != Author::Llm || c.agent.rfind(name(), 0) != 0)
        return;
    record(toJson(LlmVerdictRecord { c.id, c.sourceHash.empty() ? sha256Hex(c.source) : c.sourceHash,
        verdictName(e.verdict), e.objective, e.reasons }));
}

LlmAgentHooks liveStreamingHooks(
    std::function<void(const json& record)> record, std::function<LiveStreamWriter*()> live)
{
    LlmAgentHooks h;
    h.record = [record, live](const json& j) {
        json named = j;
        if (LiveStreamWriter* w = live())
            w->observeAgentRecord(named);
        if (record)
            record(named);
    };
    h.onDelta = [live](const std::string& delta) {
        if (LiveStreamWriter* w = live())
            w->delta(delta);
    };
    h.onRetry = [live](int, int, const std::string& why) {
        if (LiveStreamWriter* w = live())
            w->retry(why);
    };
    return h;
}

llm::Usage llmUsageFromEvents(const std::vector<Event>& events, int* calls)
{
    llm::Usage total;
    int n = 0;
    for (const auto& e : events) {
        if (e.kind != EventKind::AgentMessage)
            continue;
        const std::optional<LlmReplyRecord> reply = llmReplyRecord(e.data);
        if (!reply || !reply->usage)
            continue;
        total += *reply->usage;
        ++n;
    }
    if (calls)
        *calls = n;
    return total;
}

std::unique_ptr<Agent> makeLlmAgent(const LlmAgentSettings& settings, LlmAgentHooks hooks)
{
    return std::make_unique<LlmAgent>(settings, std::move(hooks));
}

LlmAgentSettings llmAgentSettingsFor(const std::string& agentSpec, const std::map<std::string, std::string>& extra)
{
    std::string provider = agentSpec;
    if (provider.rfind("llm:", 0) == 0)
        provider = provider.substr(4);
    else if (provider == "llm")
        provider = "openai";
    LlmAgentSettings s;
    s.provider = llm::providerPreset(provider);
    auto get = [&](const char* k) -> const std::string* {
        auto it = extra.find(k);
        return it == extra.end() ? nullptr : &it->second;
    };
    if (const auto* f = get("llm.settings_file")) {
        json j;
        try {
            j = json::parse(readFile(*f, 1u << 20));
        } catch (const json::exception& e) {
            throw InputError(*f + ": not valid JSON: " + e.what());
        }
        s.provider = llm::providerSettingsFromJson(j, *f, s.provider);
    }
    if (const auto* v = get("llm.settings")) {
        json j;
        try {
            j = json::parse(*v);
        } catch (const json::exception& e) {
            throw InputError(std::string("settings llm.settings: not valid JSON: ") + e.what());
        }
        s.provider = llm::providerSettingsFromJson(j, "llm.settings", s.provider);
    }
    if (const auto* v = get("llm.model"))
        s.provider.model = *v;
    if (const auto* v = get("language")) {
        const auto l = languageFromName(*v);
        if (!l)
            throw InputError("settings language: '" + *v + "' is not cuda or triton");
        s.language = *l;
    }
    if (const auto* v = get("llm.base_url"))
        s.provider.baseUrl = *v;
    if (const auto* v = get("llm.api_key_env"))
        s.provider.apiKeyEnv = *v;
    if (const auto* v = get("llm.api"))
        s.provider.api = llm::apiKindFromName(*v);
    if (const auto* v = get("llm.arch"))
        s.arch = *v;
    if (const auto* v = get("llm.auto_approve")) {
        if (*v != "true" && *v != "false")
            throw InputError("settings llm.auto_approve: expected true or false, got '" + *v + "'");
        s.autoApprove = *v == "true";
    }
    if (const auto* v = get("llm.context_dirs")) {
        std::stringstream ss(*v);
        std::string item;
        while (std::getline(ss, item, ':'))
            if (!item.empty())
                s.contextDirs.emplace_back(item);
    }
    return s;
}

} // namespace kl
