#pragma once
// A session on disk: a directory that survives kill -9 at any instant.
//
//   session.json                 schema version, id, problem, device, settings (atomic rewrite)
//   journal.jsonl                append-only events, one JSON object per line, fsynced per event
//   candidates/<id>/source.cu    written atomically before the event that names it (source.py for Triton; a
//                                readable view: the journal's event holds the source)
//   candidates/<id>/candidate.json
//   candidates/<id>/evaluation.json
//
// The journal is the truth: loading replays it onto session.json's header. A torn last line
// (the process died mid-write) is reported as a warning and ignored; anything else malformed is an
// error naming the file, line and field.
#include "core/errors.h"
#include "core/events.h"
#include "core/session.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kl {

class JournalReader;

struct LoadReport {
    std::vector<std::string> warnings; // e.g. "journal.jsonl line 812: torn last line ignored"
    std::uint64_t eventsLoaded = 0;
};

bool isSafeId(const std::string& id);

// The file a candidate's source is written to in its folder: source.py for a Triton kernel, else source.cu.
std::string candidateSourceFileName(const std::string& source);

// Another process holds the session's writer lock.
class SessionLockedError : public InputError {
public:
    using InputError::InputError;
}; // [A-Za-z0-9_-]{1,64}, no dots: safe as a path component

class SessionStore {
public:
    // Creates the directory (must not exist or be empty) and writes session.json + SessionCreated.
    static std::unique_ptr<SessionStore> create(const std::filesystem::path& dir, const Session& header);
    // Opens for appending; replays the journal into session(). Throws InputError on a bad session.
    static std::unique_ptr<SessionStore> open(const std::filesystem::path& dir, LoadReport* report = nullptr);
    // Read-only load (no file is touched). *journal, when given, is the reader positioned after the last event
    // loaded: it reads what a writer appends afterwards (following a running session).
    static Session load(const std::filesystem::path& dir, LoadReport* report = nullptr,
        std::vector<Event>* events = nullptr, JournalReader* journal = nullptr);

    ~SessionStore();

    const std::filesystem::path& dir() const { return m_dir; }
    const Session& session() const { return m_session; }
    EventBus& bus() { return m_bus; }

    // Each call writes its files atomically, appends one fsynced journal line, applies the event to
    // session() and publishes it. Thread-safe.
    Event addHypothesis(const Hypothesis& h);
    Event proposeCandidate(Candidate c); // id assigned when empty
    Event setStatus(const CandidateId& id, CandidateStatus s, const std::string& reason = {});
    Event recordEvaluation(const Evaluation& e); // writes evaluation.json; Accepted/Rejected follow from verdict
    Event recordReview(const ReviewDecision& r);
    Event moveHead(const CandidateId& id, const std::string& why);
    Event setState(const std::string& state, const std::string& reason);
    Event note(const std::string& text, const nlohmann::json& data = {});
    Event agentMessage(const nlohmann::json& data); // prompts, replies, usage: secrets are never passed in
    Event append(Event e); // generic

    std::vector<Event> events() const;

private:
    SessionStore(std::filesystem::path dir, Session s);
    Event appendLocked(Event e);

    std::filesystem::path m_dir;
    Session m_session;
    std::vector<Event> m_events;
    EventBus m_bus;
    mutable std::mutex m_mutex;
    int m_journalFd = -1;
};

// Applies one event to a session in memory (used by load and by live replay in the GUI).
// Throws InputError, leaving the session untouched, when the event does not fit it.
void applyEvent(Session& s, const Event& e);
// The same in two steps: validate and parse now (throws), change the session later (does not throw).
std::function<void(Session&)> prepareEvent(const Session& s, const Event& e);

// A new session's first candidates: the problem's naive baseline as the root and its tunable template, at its
// defaults, as the baseline's child (either is skipped when the problem has no such file). Returns the ids with
// their roles ("baseline", "template") in that order. Throws InputError naming the file that does not parse. The
// template is the one for a device of arch (Problem::templateFor; 0: the portable one).
std::vector<std::pair<CandidateId, std::string>> seedProblemCandidates(
    SessionStore& store, const Problem& problem, const std::filesystem::path& problemFolder, int arch = 0);

// Atomic file write: temp file in the same directory, fsync, rename, fsync directory.
void writeFileAtomic(const std::filesystem::path& path, const std::string& content);
std::string readFile(const std::filesystem::path& path, std::size_t maxBytes = 256u << 20);
std::string sha256Hex(const std::string& data);
std::string isoUtc(std::int64_t unixMs); // "2026-12-01T16:18:07Z"

} // namespace kl
