#include "core/events.h"

#include "core/errors.h"

#include <algorithm>
#include <chrono>

namespace kl {

namespace {
    struct KindName {
        EventKind k;
        const char* name;
    };
    constexpr KindName kKinds[] = {
        { EventKind::SessionCreated, "session-created" },
        { EventKind::SessionState, "session-state" },
        { EventKind::HypothesisAdded, "hypothesis-added" },
        { EventKind::CandidateProposed, "candidate-proposed" },
        { EventKind::CandidateStatus, "candidate-status" },
        { EventKind::CandidateCompiled, "candidate-compiled" },
        { EventKind::CandidateVerified, "candidate-verified" },
        { EventKind::CandidateTimed, "candidate-timed" },
        { EventKind::CandidateAccepted, "candidate-accepted" },
        { EventKind::CandidateRejected, "candidate-rejected" },
        { EventKind::ReviewDecided, "review-decided" },
        { EventKind::HeadMoved, "head-moved" },
        { EventKind::BestChanged, "best-changed" },
        { EventKind::AgentMessage, "agent-message" },
        { EventKind::Note, "note" },
        { EventKind::CandidateProfiled, "candidate-profiled" },
    };
} // namespace

const char* eventKindName(EventKind k)
{
    for (const auto& n : kKinds)
        if (n.k == k)
            return n.name;
    return "note";
}

EventKind eventKindFromName(const std::string& s)
{
    for (const auto& n : kKinds)
        if (s == n.name)
            return n.k;
    throw InputError("unknown event kind '" + s + "'");
}

nlohmann::json eventToJson(const Event& e)
{
    nlohmann::json j = { { "seq", e.seq }, { "t", e.timeMs }, { "kind", eventKindName(e.kind) } };
    if (!e.candidateId.empty())
        j["candidate"] = e.candidateId;
    if (!e.data.is_null())
        j["data"] = e.data;
    return j;
}

Event eventFromJson(const nlohmann::json& j)
{
    if (!j.is_object())
        throw InputError("event is not a JSON object");
    Event e;
    const auto seq = j.find("seq");
    if (seq == j.end() || !seq->is_number_unsigned())
        throw InputError("event field 'seq' must be a positive integer");
    e.seq = seq->get<std::uint64_t>();
    const auto t = j.find("t");
    if (t == j.end() || !t->is_number_integer())
        throw InputError("event field 't' must be an integer (ms)");
    e.timeMs = t->get<std::int64_t>();
    const auto kind = j.find("kind");
    if (kind == j.end() || !kind->is_string())
        throw InputError("event field 'kind' must be a string");
    e.kind = eventKindFromName(kind->get<std::string>());
    if (const auto c = j.find("candidate"); c != j.end()) {
        if (!c->is_string())
            throw InputError("event field 'candidate' must be a string");
        e.candidateId = c->get<std::string>();
    }
    if (const auto d = j.find("data"); d != j.end())
        e.data = *d;
    return e;
}

EventBus::Token EventBus::subscribe(Handler h)
{
    std::lock_guard lock(m_mutex);
    const Token t = m_next++;
    m_handlers.emplace_back(t, std::make_shared<Handler>(std::move(h)));
    return t;
}

void EventBus::unsubscribe(Token t)
{
    std::lock_guard lock(m_mutex);
    m_handlers.erase(std::remove_if(m_handlers.begin(), m_handlers.end(), [t](const auto& p) { return p.first == t; }),
        m_handlers.end());
}

void EventBus::publish(const Event& e) const
{
    std::vector<std::shared_ptr<Handler>> handlers;
    {
        std::lock_guard lock(m_mutex);
        for (const auto& [t, h] : m_handlers)
            handlers.push_back(h);
    }
    for (const auto& h : handlers)
        (*h)(e);
}

std::int64_t nowMs()
{
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

} // namespace kl
