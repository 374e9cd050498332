#include "core/session_store.h"

#include "core/errors.h"
#include "core/journal_reader.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kl {

namespace {

    constexpr const char* kHeaderFile = "session.json";
    constexpr const char* kJournalFile = "journal.jsonl";
    constexpr std::size_t kMaxJournalBytes = std::size_t(2) << 30;

    [[noreturn]] void throwErrno(const std::string& what)
    {
        throw std::runtime_error(what + ": " + std::strerror(errno));
    }

    void fsyncDir(const fs::path& dir)
    {
        const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return;
        ::fsync(fd);
        ::close(fd);
    }

    void writeAll(int fd, const char* data, std::size_t size, const std::string& what)
    {
        while (size > 0) {
            const ssize_t n = ::write(fd, data, size);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                throwErrno("writing " + what);
            }
            data += n;
            size -= static_cast<std::size_t>(n);
        }
    }

    bool isSecretKey(const std::string& key)
    {
        std::string k;
        for (char c : key)
            k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        k.erase(std::remove_if(k.begin(), k.end(), [](char c) { return c == '_' || c == '-'; }), k.end());
        return k == "apikey" || k == "authorization" || k == "xapikey" || k == "secret" || k == "password"
            || k == "bearer" || k == "accesstoken" || k == "apikeyvalue";
    }

    // Secrets never reach the disk, whatever a caller passes in.
    void redactSecrets(nlohmann::json& j)
    {
        if (j.is_object()) {
            for (auto it = j.begin(); it != j.end(); ++it) {
                if (isSecretKey(it.key()))
                    it.value() = "[redacted]";
                else
                    redactSecrets(it.value());
            }
        } else if (j.is_array()) {
            for (auto& v : j)
                redactSecrets(v);
        }
    }

    Json headerToJson(const Session& s)
    {
        Json settings = toJson(s.settings);
        redactSecrets(settings);
        return { { "schema_version", kSessionSchemaVersion }, { "id", s.id }, { "problem", s.problemName },
            { "problem_folder", s.problemFolder }, { "device", toJson(s.device) }, { "settings", settings },
            { "created_ms", s.createdMs } };
    }

    Session headerFromJson(const Json& j, const std::string& where)
    {
        if (!j.is_object())
            throw InputError(where + ": expected a JSON object");
        const auto version = jsonfield::integer(j, "schema_version", where, 0, INT32_MAX);
        if (version > kSessionSchemaVersion)
            throw InputError(where + ".schema_version: " + std::to_string(version)
                + " is newer than this KernelLoop understands (" + std::to_string(kSessionSchemaVersion)
                + "); upgrade KernelLoop to open it");
        if (version < 1)
            throw InputError(where + ".schema_version: " + std::to_string(version) + " is not a valid version");
        Session s;
        s.id = jsonfield::string(j, "id", where);
        if (!isSafeId(s.id))
            throw InputError(where + ".id: '" + s.id + "' is not a safe session id");
        s.problemName = jsonfield::string(j, "problem", where);
        s.problemFolder = jsonfield::stringOr(j, "problem_folder", "", where);
        if (j.contains("device"))
            s.device = deviceFromJson(j.at("device"), where + ".device");
        if (j.contains("settings"))
            s.settings = settingsFromJson(j.at("settings"), where + ".settings");
        s.createdMs = jsonfield::integerOr(j, "created_ms", 0, where, 0);
        return s;
    }

    fs::path candidateDir(const fs::path& dir, const CandidateId& id)
    {
        if (!isSafeId(id))
            throw InputError("unsafe candidate id '" + id + "'");
        return dir / "candidates" / id;
    }

    // Unique across threads and forked processes (a forked child inherits the parent's generator state).
    std::string tempSuffix()
    {
        static thread_local std::mt19937_64 rng { std::random_device {}() };
        std::ostringstream os;
        os << std::hex << ::getpid() << '-' << rng();
        return os.str();
    }

    // One writer per session: a second process gets a clear error (the workbench then follows the session
    // read-only and steers it through the inbox). The lock dies with the process, kill -9 included.
    void lockJournal(int fd, const fs::path& dir)
    {
        // A reader that only probes for a writer (the workbench's live-stream check) holds a shared lock for
        // microseconds: retry briefly before calling the session taken.
        int rc = -1;
        for (int attempt = 0; attempt < 20; ++attempt) {
            rc = ::flock(fd, LOCK_EX | LOCK_NB);
            if (rc == 0 || errno != EWOULDBLOCK)
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (rc != 0) {
            if (errno == EWOULDBLOCK)
                throw SessionLockedError("session " + dir.string()
                    + " is being written by another process (kloop run?); open it read-only or "
                      "follow it, and steer it through its inbox");
            throwErrno("locking " + (dir / kJournalFile).string());
        }
    }

    // What a create killed before its session-created event leaves: nothing recorded, so a new create may reuse it.
    bool isInterruptedCreate(const fs::path& dir)
    {
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            const std::string name = entry.path().filename().string();
            const bool ok
                = (name == "candidates" && fs::is_directory(entry.path(), ec) && fs::is_empty(entry.path(), ec))
                || (name == kJournalFile && fs::file_size(entry.path(), ec) == 0 && !ec)
                || name.rfind(kHeaderFile, 0) == 0;
            if (!ok)
                return false;
        }
        return !ec;
    }

} // namespace

bool isSafeId(const std::string& id)
{
    if (id.empty() || id.size() > 64)
        return false;
    for (char c : id)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
            return false;
    return true;
}

void writeFileAtomic(const fs::path& path, const std::string& content)
{
    fs::path tmp;
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
        tmp = path.parent_path() / ("." + path.filename().string() + ".tmp-" + tempSuffix());
        fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0)
        throwErrno("creating " + tmp.string());
    try {
        writeAll(fd, content.data(), content.size(), tmp.string());
        if (::fsync(fd) != 0)
            throwErrno("fsync " + tmp.string());
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        errno = err;
        throwErrno("renaming to " + path.string());
    }
    fsyncDir(path.parent_path());
}

std::string candidateSourceFileName(const std::string& source)
{
    return detectLanguage(source) == KernelLanguage::Triton ? "source.py" : "source.cu";
}

std::vector<std::pair<CandidateId, std::string>> seedProblemCandidates(
    SessionStore& store, const Problem& problem, const fs::path& problemFolder, int arch)
{
    std::vector<std::pair<CandidateId, std::string>> seeded;
    CandidateId parent;
    for (const auto& [file, role] : { std::pair { problem.baselineFile, std::string("baseline") },
             std::pair { problem.templateFor(arch), std::string("template") } }) {
        const fs::path path = problemFolder / file;
        if (file.empty() || !fs::exists(path))
            continue;
        Candidate c;
        c.source = readFile(path, 4u << 20);
        c.parentId = parent;
        c.author = Author::Human;
        c.agent = "problem:" + role;
        try {
            c.params = parseKernelSpec(c.source, problem).defaults();
        } catch (const InputError& e) {
            throw InputError(path.string() + ": " + e.what());
        }
        parent = store.proposeCandidate(c).candidateId;
        seeded.emplace_back(parent, role);
    }
    return seeded;
}

std::string readFile(const fs::path& path, std::size_t maxBytes)
{
    std::error_code ec;
    const auto status = fs::symlink_status(path, ec);
    if (ec || !fs::exists(status))
        throw std::runtime_error("cannot read " + path.string() + ": no such file");
    if (!fs::is_regular_file(status))
        throw std::runtime_error("cannot read " + path.string() + ": not a regular file");
    const auto size = fs::file_size(path, ec);
    if (ec)
        throw std::runtime_error("cannot read " + path.string() + ": " + ec.message());
    if (size > maxBytes)
        throw std::runtime_error(path.string() + " is " + std::to_string(size) + " bytes, more than the limit of "
            + std::to_string(maxBytes));
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error("cannot open " + path.string());
    std::string data(size, '\0');
    in.read(data.data(), static_cast<std::streamsize>(size));
    data.resize(static_cast<std::size_t>(in.gcount()));
    return data;
}

std::function<void(Session&)> prepareEvent(const Session& s, const Event& e)
{
    const std::string where = "event " + std::to_string(e.seq) + " (" + eventKindName(e.kind) + ")";
    auto requireCandidate = [&]() {
        if (!s.tree.contains(e.candidateId))
            throw InputError(where + ": unknown candidate '" + e.candidateId + "'");
    };
    const CandidateId id = e.candidateId;
    switch (e.kind) {
    case EventKind::SessionCreated:
    case EventKind::SessionState:
    case EventKind::AgentMessage:
    case EventKind::Note:
    case EventKind::CandidateCompiled:
    case EventKind::CandidateVerified:
    case EventKind::CandidateTimed:
    case EventKind::BestChanged:
        return [](Session&) {};
    case EventKind::HypothesisAdded: {
        Hypothesis h = hypothesisFromJson(e.data, where + ".data");
        return [h = std::move(h)](Session& t) { t.hypotheses[h.id] = h; };
    }
    case EventKind::CandidateProposed: {
        Candidate c = candidateFromJson(e.data, where + ".data");
        if (s.tree.contains(c.id))
            throw InputError(where + ": duplicate candidate id '" + c.id + "'");
        if (!c.parentId.empty() && !s.tree.contains(c.parentId))
            throw InputError(where + ": candidate '" + c.id + "' names unknown parent '" + c.parentId + "'");
        return [c = std::move(c)](Session& t) mutable { t.tree.add(std::move(c)); };
    }
    case EventKind::CandidateStatus: {
        requireCandidate();
        const CandidateStatus status = statusFromName(jsonfield::string(e.data, "status", where + ".data"));
        std::string reason = jsonfield::stringOr(e.data, "reason", "", where + ".data");
        return [id, status, reason = std::move(reason)](Session& t) {
            Candidate& c = t.tree.at(id);
            c.status = status;
            c.statusReason = reason;
        };
    }
    case EventKind::CandidateAccepted:
    case EventKind::CandidateRejected: {
        requireCandidate();
        Evaluation ev
            = evaluationFromJson(jsonfield::require(e.data, "evaluation", where + ".data"), where + ".data.evaluation");
        const CandidateStatus status = statusFromName(jsonfield::string(e.data, "status", where + ".data"));
        std::string reason = jsonfield::stringOr(e.data, "reason", "", where + ".data");
        return [id, status, reason = std::move(reason), ev = std::move(ev)](Session& t) mutable {
            Candidate& c = t.tree.at(id);
            c.status = status;
            c.statusReason = reason;
            t.evaluations[id] = std::move(ev);
        };
    }
    case EventKind::ReviewDecided: {
        ReviewDecision r = reviewFromJson(e.data, where + ".data");
        if (!s.tree.contains(r.candidateId))
            throw InputError(where + ": review of unknown candidate '" + r.candidateId + "'");
        return [r = std::move(r)](Session& t) {
            t.reviews.push_back(r);
            Candidate& c = t.tree.at(r.candidateId);
            if (c.status == CandidateStatus::PendingReview) {
                c.status = r.approved ? CandidateStatus::Approved : CandidateStatus::Rejected;
                c.statusReason = r.approved ? "approved by the engineer" : "rejected by the engineer: " + r.reason;
            }
        };
    }
    case EventKind::HeadMoved:
        requireCandidate();
        return [id](Session& t) { t.tree.setHead(id); };
    case EventKind::CandidateProfiled: {
        requireCandidate();
        CandidateProfile p = candidateProfileFromJson(e.data, where + ".data");
        if (p.candidateId != id)
            throw InputError(
                where + ".data.candidate: '" + p.candidateId + "' is not the event's candidate '" + id + "'");
        return [p = std::move(p)](Session& t) mutable {
            const CandidateId key = p.candidateId;
            t.profiles[key] = std::move(p);
        };
    }
    }
    throw InputError(where + ": unhandled event kind");
}

void applyEvent(Session& s, const Event& e)
{
    prepareEvent(s, e)(s);
}

SessionStore::SessionStore(fs::path dir, Session s)
    : m_dir(std::move(dir))
    , m_session(std::move(s))
{
}

SessionStore::~SessionStore()
{
    if (m_journalFd >= 0)
        ::close(m_journalFd);
}

std::unique_ptr<SessionStore> SessionStore::create(const fs::path& dir, const Session& header)
{
    if (!isSafeId(header.id))
        throw InputError("session id '" + header.id + "' must be 1-64 letters, digits, '_' or '-'");
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        throw InputError(dir.string() + " is a file; a session is a new (or empty) directory");
    if (fs::exists(dir, ec) && !fs::is_empty(dir, ec) && !isInterruptedCreate(dir))
        throw InputError(dir.string() + " already exists and is not empty; choose a new session directory");
    fs::create_directories(dir / "candidates", ec);
    if (ec)
        throw InputError("cannot create " + dir.string() + ": " + ec.message());
    Session s = header;
    s.tree = CandidateTree {};
    s.hypotheses.clear();
    s.evaluations.clear();
    s.reviews.clear();
    if (s.createdMs == 0)
        s.createdMs = nowMs();
    // The writer lock comes before any file is written: two creators racing for one directory would otherwise
    // both pass the emptiness check above and write two session-created events.
    std::unique_ptr<SessionStore> store(new SessionStore(dir, s));
    store->m_journalFd = ::open((dir / kJournalFile).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (store->m_journalFd < 0)
        throwErrno("creating " + (dir / kJournalFile).string());
    try {
        lockJournal(store->m_journalFd, dir);
    } catch (const SessionLockedError&) {
        throw SessionLockedError(
            dir.string() + " is being created or written by another process; choose a new session directory");
    }
    struct stat journalStat { };
    if (::fstat(store->m_journalFd, &journalStat) != 0)
        throwErrno("reading " + (dir / kJournalFile).string());
    // Whoever held the lock before us either finished (a session-created line) or died before writing one.
    if (journalStat.st_size != 0)
        throw InputError(dir.string() + " was created by another process meanwhile; choose a new session directory");
    writeFileAtomic(dir / kHeaderFile, headerToJson(s).dump(2) + "\n");
    fsyncDir(dir);
    Event e;
    e.kind = EventKind::SessionCreated;
    e.data = headerToJson(s);
    store->append(e);
    return store;
}

Session SessionStore::load(const fs::path& dir, LoadReport* report, std::vector<Event>* events, JournalReader* journal)
{
    const fs::path headerPath = dir / kHeaderFile;
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        throw InputError("not a KernelLoop session: " + dir.string() + " is a file; a session is a directory");
    std::string headerText;
    try {
        headerText = readFile(headerPath, 16u << 20);
    } catch (const std::exception& e) {
        throw InputError(std::string("not a KernelLoop session: ") + e.what());
    }
    Json hj;
    try {
        hj = Json::parse(headerText);
    } catch (const Json::parse_error& e) {
        throw InputError(headerPath.string() + ": not valid JSON (byte " + std::to_string(e.byte) + ")");
    } catch (const Json::exception& e) {
        throw InputError(headerPath.string() + ": " + e.what());
    }
    Session s = headerFromJson(hj, headerPath.string());

    LoadReport local;
    LoadReport& rep = report ? *report : local;
    JournalReader reader(dir / kJournalFile);
    reader.readAppended([&](Event e) {
        applyEvent(s, e);
        ++rep.eventsLoaded;
        if (events)
            events->push_back(std::move(e));
    });
    if (reader.unterminatedBytes() > 0)
        // The process died mid-write: the event never completed, so nothing recorded is lost.
        rep.warnings.push_back(reader.path().string() + " line " + std::to_string(reader.linesRead() + 1)
            + ": torn last line ignored (" + std::to_string(reader.unterminatedBytes())
            + " bytes; the writer was interrupted)");
    const fs::path& journalPath = reader.path();
    if (rep.eventsLoaded == 0)
        throw InputError(journalPath.string() + ": empty journal (no session-created event)");
    if (journal)
        *journal = std::move(reader);
    return s;
}

std::unique_ptr<SessionStore> SessionStore::open(const fs::path& dir, LoadReport* report)
{
    LoadReport local;
    LoadReport& rep = report ? *report : local;
    std::vector<Event> events;
    Session s = load(dir, &rep, &events);
    // Take the writer's lock before touching the journal (a torn tail is cut below).
    const int lockFd = ::open((dir / kJournalFile).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (lockFd < 0)
        throwErrno("opening " + (dir / kJournalFile).string());
    try {
        lockJournal(lockFd, dir);
    } catch (...) {
        ::close(lockFd);
        throw;
    }
    std::unique_ptr<SessionStore> store(new SessionStore(dir, std::move(s)));
    store->m_journalFd = lockFd;
    store->m_events = std::move(events);
    const fs::path journalPath = dir / kJournalFile;
    // Cut a torn tail before appending, or the next event would be glued to it.
    const std::string journal = readFile(journalPath, kMaxJournalBytes);
    std::size_t keep = journal.size();
    if (!journal.empty() && journal.back() != '\n') {
        const std::size_t lastNl = journal.rfind('\n');
        keep = lastNl == std::string::npos ? 0 : lastNl + 1;
    }
    if (keep != journal.size()) {
        if (::ftruncate(store->m_journalFd, static_cast<off_t>(keep)) != 0)
            throwErrno("truncating the torn tail of " + journalPath.string());
    }
    std::error_code ec;
    fs::create_directories(dir / "candidates", ec);
    return store;
}

Event SessionStore::appendLocked(Event e)
{
    e.seq = m_events.empty() ? 1 : m_events.back().seq + 1;
    if (e.timeMs == 0)
        e.timeMs = nowMs();
    redactSecrets(e.data);
    // Validate before writing, so an invalid event never reaches the journal; apply only after the fsync.
    auto commit = prepareEvent(m_session, e);
    const std::string line = eventToJson(e).dump() + "\n";
    writeAll(m_journalFd, line.data(), line.size(), kJournalFile);
    if (::fdatasync(m_journalFd) != 0)
        throwErrno("fsync journal");
    commit(m_session);
    m_events.push_back(e);
    return e;
}

Event SessionStore::append(Event e)
{
    Event done;
    {
        std::lock_guard lock(m_mutex);
        done = appendLocked(std::move(e));
    }
    m_bus.publish(done);
    return done;
}

Event SessionStore::addHypothesis(const Hypothesis& h)
{
    Hypothesis copy = h;
    if (copy.id.empty()) {
        std::lock_guard lock(m_mutex);
        copy.id = "h" + std::to_string(m_session.hypotheses.size() + 1);
        while (m_session.hypotheses.count(copy.id))
            copy.id += "x";
    }
    if (copy.createdMs == 0)
        copy.createdMs = nowMs();
    Event e;
    e.kind = EventKind::HypothesisAdded;
    e.data = toJson(copy);
    return append(e);
}

Event SessionStore::proposeCandidate(Candidate c)
{
    Event done;
    {
        std::lock_guard lock(m_mutex);
        if (c.id.empty())
            c.id = m_session.tree.nextId();
        if (c.createdMs == 0)
            c.createdMs = nowMs();
        c.sourceHash = sha256Hex(c.source);
        const fs::path cdir = candidateDir(m_dir, c.id);
        std::error_code ec;
        fs::create_directories(cdir, ec);
        if (ec)
            throw std::runtime_error("cannot create " + cdir.string() + ": " + ec.message());
        // The folder is a readable view; the journal event below is what makes the candidate exist.
        writeFileAtomic(cdir / candidateSourceFileName(c.source), c.source);
        writeFileAtomic(cdir / "candidate.json", toJson(c, false).dump(2) + "\n");
        Event e;
        e.kind = EventKind::CandidateProposed;
        e.candidateId = c.id;
        e.data = toJson(c, true);
        done = appendLocked(std::move(e));
    }
    m_bus.publish(done);
    return done;
}

Event SessionStore::setStatus(const CandidateId& id, CandidateStatus s, const std::string& reason)
{
    Event e;
    e.kind = EventKind::CandidateStatus;
    e.candidateId = id;
    e.data = { { "status", statusName(s) }, { "reason", reason } };
    return append(e);
}

Event SessionStore::recordEvaluation(const Evaluation& ev)
{
    CandidateStatus status = CandidateStatus::Rejected;
    switch (ev.verdict) {
    case Verdict::Accepted:
        status = CandidateStatus::Accepted;
        break;
    case Verdict::PendingReview:
        status = CandidateStatus::PendingReview;
        break;
    case Verdict::CompileFailed:
        status = CandidateStatus::CompileFailed;
        break;
    case Verdict::Crashed:
        status = CandidateStatus::Crashed;
        break;
    case Verdict::TimedOut:
        status = CandidateStatus::TimedOut;
        break;
    case Verdict::Rejected:
    case Verdict::Correct:
        status = CandidateStatus::Rejected;
        break;
    }
    std::string reason;
    for (const auto& r : ev.reasons) {
        if (!reason.empty())
            reason += "; ";
        reason += r.rule + ": " + r.message;
    }
    Event done;
    {
        std::lock_guard lock(m_mutex);
        const fs::path cdir = candidateDir(m_dir, ev.candidateId);
        if (!m_session.tree.contains(ev.candidateId))
            throw InputError("evaluation of unknown candidate '" + ev.candidateId + "'");
        writeFileAtomic(cdir / "evaluation.json", toJson(ev).dump(2) + "\n");
        Event e;
        e.kind = status == CandidateStatus::Accepted ? EventKind::CandidateAccepted : EventKind::CandidateRejected;
        e.candidateId = ev.candidateId;
        e.data = { { "status", statusName(status) }, { "reason", reason }, { "evaluation", toJson(ev) } };
        done = appendLocked(std::move(e));
    }
    m_bus.publish(done);
    return done;
}

Event SessionStore::recordReview(const ReviewDecision& r)
{
    ReviewDecision copy = r;
    if (copy.decidedMs == 0)
        copy.decidedMs = nowMs();
    Event e;
    e.kind = EventKind::ReviewDecided;
    e.candidateId = r.candidateId;
    e.data = toJson(copy);
    return append(e);
}

Event SessionStore::moveHead(const CandidateId& id, const std::string& why)
{
    Event e;
    e.kind = EventKind::HeadMoved;
    e.candidateId = id;
    e.data = { { "reason", why } };
    return append(e);
}

Event SessionStore::setState(const std::string& state, const std::string& reason)
{
    Event e;
    e.kind = EventKind::SessionState;
    e.data = { { "state", state }, { "reason", reason } };
    return append(e);
}

Event SessionStore::note(const std::string& text, const nlohmann::json& data)
{
    Event e;
    e.kind = EventKind::Note;
    e.data = { { "text", text } };
    if (!data.is_null())
        e.data["data"] = data;
    return append(e);
}

Event SessionStore::agentMessage(const nlohmann::json& data)
{
    Event e;
    e.kind = EventKind::AgentMessage;
    e.data = data;
    return append(e);
}

std::vector<Event> SessionStore::events() const
{
    std::lock_guard lock(m_mutex);
    return m_events;
}

std::string isoUtc(std::int64_t unixMs)
{
    const std::time_t t = static_cast<std::time_t>(unixMs / 1000);
    std::tm tm {};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

} // namespace kl
