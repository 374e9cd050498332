#pragma once
// The event stream of a session. Every change to a session is an event; the store journals them,
// the GUI and CLI subscribe to them, and replay re-emits them. Transport-agnostic: an event is a
// value with a JSON form.
#include "core/candidate.h"
#include "core/evaluation.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kl {

enum class EventKind {
    SessionCreated,
    SessionState, // running / paused / stopped / finished, with a reason
    HypothesisAdded,
    CandidateProposed,
    CandidateStatus, // compiling / verifying / timing / pending-review ...
    CandidateCompiled,
    CandidateVerified,
    CandidateTimed,
    CandidateAccepted,
    CandidateRejected,
    ReviewDecided,
    HeadMoved, // rollback or branch
    BestChanged,
    AgentMessage, // prompt/reply/usage records of agents, streamed text
    Note,
    CandidateProfiled, // the best's speed-of-light profile, as the agent's prompt gets it (CandidateProfile)
};
const char* eventKindName(EventKind k);
EventKind eventKindFromName(const std::string& s); // throws InputError

struct Event {
    std::uint64_t seq = 0; // assigned by the store, 1-based, contiguous
    std::int64_t timeMs = 0;
    EventKind kind = EventKind::Note;
    std::string candidateId;
    nlohmann::json data; // kind-specific payload (e.g. the whole Candidate for CandidateProposed)
};

nlohmann::json eventToJson(const Event& e);
Event eventFromJson(const nlohmann::json& j); // throws InputError

// Synchronous fan-out to subscribers; thread-safe. Subscribers must not block (the GUI re-posts
// to its own thread; the CLI prints).
class EventBus {
public:
    using Handler = std::function<void(const Event&)>;
    using Token = std::uint64_t;
    Token subscribe(Handler h);
    void unsubscribe(Token t);
    void publish(const Event& e) const;

private:
    mutable std::mutex m_mutex;
    std::vector<std::pair<Token, std::shared_ptr<Handler>>> m_handlers;
    Token m_next = 1;
};

std::int64_t nowMs();

} // namespace kl
