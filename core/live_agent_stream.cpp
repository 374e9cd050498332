#include "core/live_agent_stream.h"

#include "core/agent_records.h"
#include "core/errors.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using nlohmann::json;

namespace kl {

namespace {

    struct KindName {
        LiveStreamRecord::Kind kind;
        const char* name;
    };
    constexpr KindName kKinds[] = {
        { LiveStreamRecord::Kind::Begin, "begin" },
        { LiveStreamRecord::Kind::Delta, "delta" },
        { LiveStreamRecord::Kind::Retry, "retry" },
        { LiveStreamRecord::Kind::Rotate, "rotate" },
        { LiveStreamRecord::Kind::End, "end" },
    };

    std::string dumpLine(const LiveStreamRecord& r)
    {
        // A chunk cut inside a UTF-8 sequence must not cost the whole line: invalid bytes become U+FFFD.
        return toJson(r).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    }

    // The longest prefix of s, at most n bytes, that does not end inside a UTF-8 sequence.
    std::size_t utf8Prefix(const std::string& s, std::size_t from, std::size_t n)
    {
        if (from + n >= s.size())
            return s.size() - from;
        std::size_t end = from + n;
        while (end > from && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80)
            --end;
        return end > from ? end - from : n;
    }

    template <typename T> T field(const json& j, const char* key, T fallback)
    {
        const auto it = j.find(key);
        if (it == j.end() || it->is_null())
            return fallback;
        try {
            return it->get<T>();
        } catch (const json::exception&) {
            throw InputError(std::string("live stream line: field '") + key + "' has the wrong type");
        }
    }

} // namespace

const char* liveStreamKindName(LiveStreamRecord::Kind k)
{
    for (const auto& n : kKinds)
        if (n.kind == k)
            return n.name;
    return "delta";
}

json toJson(const LiveStreamRecord& r)
{
    json j = { { "kind", liveStreamKindName(r.kind) }, { "stream", r.stream } };
    switch (r.kind) {
    case LiveStreamRecord::Kind::Begin:
        j["call"] = r.call;
        j["attempt"] = r.attempt;
        j["provider"] = r.provider;
        j["model"] = r.model;
        break;
    case LiveStreamRecord::Kind::Rotate:
        j["call"] = r.call;
        j["attempt"] = r.attempt;
        j["offset"] = r.offset;
        break;
    case LiveStreamRecord::Kind::Delta:
        j["offset"] = r.offset;
        j["text"] = r.text;
        break;
    case LiveStreamRecord::Kind::Retry:
    case LiveStreamRecord::Kind::End:
        j["text"] = r.text;
        break;
    }
    return j;
}

LiveStreamRecord liveStreamRecordFromJson(const json& j)
{
    if (!j.is_object())
        throw InputError("live stream line: not a JSON object");
    LiveStreamRecord r;
    const std::string kind = field<std::string>(j, "kind", "");
    bool known = false;
    for (const auto& k : kKinds)
        if (kind == k.name) {
            r.kind = k.kind;
            known = true;
        }
    if (!known)
        throw InputError("live stream line: unknown kind '" + kind + "'");
    r.stream = field<std::string>(j, "stream", "");
    if (r.stream.empty())
        throw InputError("live stream line: no stream id");
    r.call = field<int>(j, "call", 0);
    r.attempt = field<int>(j, "attempt", 0);
    r.provider = field<std::string>(j, "provider", "");
    r.model = field<std::string>(j, "model", "");
    r.offset = field<std::uint64_t>(j, "offset", 0);
    r.text = field<std::string>(j, "text", "");
    return r;
}

fs::path liveAgentStreamPath(const fs::path& sessionDir)
{
    return sessionDir / "live" / "agent-stream.jsonl";
}

bool sessionHasWriter(const fs::path& sessionDir)
{
    const int fd = ::open((sessionDir / "journal.jsonl").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    // The writer holds an exclusive flock on the journal for its lifetime (SessionStore).
    const bool locked = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd); // also drops our shared lock, if we got it
    return locked;
}

// ---- writer ----

LiveStreamWriter::LiveStreamWriter(fs::path sessionDir, std::size_t maxBytes)
    : m_path(liveAgentStreamPath(sessionDir))
    , m_maxBytes(std::max<std::size_t>(maxBytes, 1024))
{
    const auto ms
        = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
    m_runId = "r" + std::to_string(ms) + "-" + std::to_string(::getpid());
    std::error_code ec;
    fs::remove(m_path, ec);
}

LiveStreamWriter::~LiveStreamWriter()
{
    std::lock_guard lock(m_mutex);
    closeFile(true);
    std::error_code ec;
    fs::remove(m_path.parent_path(), ec); // only if empty
}

std::string LiveStreamWriter::begin(int call, int attempt, const std::string& provider, const std::string& model)
{
    std::lock_guard lock(m_mutex);
    m_stream = m_runId + "." + std::to_string(call) + "." + std::to_string(attempt);
    m_call = call;
    m_attempt = attempt;
    m_offset = 0;
    LiveStreamRecord r;
    r.kind = LiveStreamRecord::Kind::Begin;
    r.stream = m_stream;
    r.call = call;
    r.attempt = attempt;
    r.provider = provider;
    r.model = model;
    startFile(r);
    return m_stream;
}

void LiveStreamWriter::delta(const std::string& text)
{
    std::lock_guard lock(m_mutex);
    if (m_stream.empty() || text.empty())
        return;
    // Pieces small enough that a line, escaped, always fits in a file of m_maxBytes with its rotate line.
    const std::size_t piece = std::max<std::size_t>(64, m_maxBytes / 16);
    for (std::size_t from = 0; from < text.size();) {
        const std::size_t n = utf8Prefix(text, from, piece);
        LiveStreamRecord r;
        r.kind = LiveStreamRecord::Kind::Delta;
        r.stream = m_stream;
        r.offset = m_offset;
        r.text = text.substr(from, n);
        append(r);
        m_offset += n;
        from += n;
    }
}

void LiveStreamWriter::retry(const std::string& why)
{
    std::lock_guard lock(m_mutex);
    if (m_stream.empty())
        return;
    m_offset = 0;
    LiveStreamRecord r;
    r.kind = LiveStreamRecord::Kind::Retry;
    r.stream = m_stream;
    r.text = why.substr(0, 4096);
    append(r);
}

void LiveStreamWriter::end(const std::string& how)
{
    std::lock_guard lock(m_mutex);
    if (m_stream.empty())
        return;
    LiveStreamRecord r;
    r.kind = LiveStreamRecord::Kind::End;
    r.stream = m_stream;
    r.text = how;
    append(r);
    closeFile(true);
    m_stream.clear();
}

void LiveStreamWriter::observeAgentRecord(json& record)
{
    // A record of an unexpected shape still goes to the journal; it only has no live view.
    if (auto request = llmRequestRecord(record)) {
        request->liveStream = begin(request->call, request->replyAttempt, request->provider, request->model);
        record = toJson(*request);
        return;
    }
    const std::string type = agentRecordType(record);
    if (type != kLlmReplyType && type != kLlmErrorType)
        return;
    const std::string stream = currentStream();
    if (stream.empty())
        return;
    end(type == kLlmReplyType ? "done" : "error");
    record[kLiveStreamKey] = stream;
}

std::string LiveStreamWriter::currentStream() const
{
    std::lock_guard lock(m_mutex);
    return m_stream;
}

std::uint64_t LiveStreamWriter::bytesOnDisk() const
{
    std::lock_guard lock(m_mutex);
    return m_fileBytes;
}

int LiveStreamWriter::rotations() const
{
    std::lock_guard lock(m_mutex);
    return m_rotations;
}

std::string LiveStreamWriter::error() const
{
    std::lock_guard lock(m_mutex);
    return m_error;
}

void LiveStreamWriter::startFile(const LiveStreamRecord& first)
{
    if (!m_error.empty())
        return;
    std::error_code ec;
    fs::create_directories(m_path.parent_path(), ec);
    const fs::path tmp = m_path.parent_path() / ("." + m_path.filename().string() + ".tmp");
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        m_error = "cannot create " + tmp.string() + ": " + std::strerror(errno);
        closeFile(true);
        return;
    }
    closeFile(false);
    m_fd = fd;
    m_fileBytes = 0;
    appendLine(dumpLine(first));
    // A fresh inode: a reader finishes the previous file through its open descriptor, then starts this one.
    if (m_fd >= 0 && ::rename(tmp.c_str(), m_path.c_str()) != 0) {
        m_error = "cannot rename " + tmp.string() + ": " + std::strerror(errno);
        closeFile(false);
        fs::remove(tmp, ec);
    }
}

void LiveStreamWriter::append(const LiveStreamRecord& r)
{
    if (m_fd < 0)
        return;
    const std::string line = dumpLine(r);
    if (m_fileBytes + line.size() > m_maxBytes) {
        ++m_rotations;
        LiveStreamRecord rotate;
        rotate.kind = LiveStreamRecord::Kind::Rotate;
        rotate.stream = m_stream;
        rotate.call = m_call;
        rotate.attempt = m_attempt;
        rotate.offset = r.kind == LiveStreamRecord::Kind::Delta ? r.offset : m_offset;
        startFile(rotate);
    }
    appendLine(line);
}

void LiveStreamWriter::appendLine(const std::string& line)
{
    // One write per line (O_APPEND), so a reader sees whole lines unless the disk is full.
    std::size_t done = 0;
    while (m_fd >= 0 && done < line.size()) {
        const ssize_t n = ::write(m_fd, line.data() + done, line.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            m_error = "writing " + m_path.string() + ": " + std::strerror(errno);
            closeFile(true);
            return;
        }
        done += static_cast<std::size_t>(n);
    }
    m_fileBytes += done;
}

void LiveStreamWriter::closeFile(bool remove)
{
    if (m_fd >= 0)
        ::close(m_fd);
    m_fd = -1;
    m_fileBytes = 0;
    if (remove) {
        std::error_code ec;
        fs::remove(m_path, ec);
    }
}

// ---- reader ----

LiveStreamReader::LiveStreamReader(fs::path sessionDir, std::size_t maxLineBytes)
    : m_path(liveAgentStreamPath(sessionDir))
    , m_maxLine(std::max<std::size_t>(maxLineBytes, 256))
{
}

LiveStreamReader::~LiveStreamReader()
{
    closeFile();
}

std::vector<LiveStreamRecord> LiveStreamReader::poll()
{
    std::vector<LiveStreamRecord> out;
    struct stat st { };
    const bool exists = ::stat(m_path.c_str(), &st) == 0;
    if (m_fd >= 0 && (!exists || st.st_dev != m_dev || st.st_ino != m_ino)) {
        // Replaced or removed: whatever the writer appended to the old file before that still counts.
        drain(out);
        closeFile();
    }
    if (m_fd < 0 && exists) {
        m_fd = ::open(m_path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat opened { };
        if (m_fd >= 0 && ::fstat(m_fd, &opened) == 0) {
            m_dev = opened.st_dev;
            m_ino = opened.st_ino;
        } else {
            closeFile();
        }
        m_offset = 0;
        m_partial.clear();
        m_skippingLongLine = false;
    }
    if (m_fd >= 0)
        drain(out);
    return out;
}

void LiveStreamReader::skipCurrent()
{
    poll();
    struct stat st { };
    if (m_fd >= 0 && ::fstat(m_fd, &st) == 0) {
        m_offset = static_cast<std::uint64_t>(st.st_size);
        m_partial.clear();
        m_skippingLongLine = false;
    }
}

void LiveStreamReader::drain(std::vector<LiveStreamRecord>& out)
{
    struct stat st { };
    if (::fstat(m_fd, &st) != 0)
        return;
    if (static_cast<std::uint64_t>(st.st_size) < m_offset) {
        // Truncated in place: start over (the offsets in the lines show what was lost).
        m_offset = 0;
        m_partial.clear();
        m_skippingLongLine = false;
    }
    char buffer[64 * 1024];
    for (;;) {
        const ssize_t n = ::pread(m_fd, buffer, sizeof buffer, static_cast<off_t>(m_offset));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        m_offset += static_cast<std::uint64_t>(n);
        m_partial.append(buffer, static_cast<std::size_t>(n));
        takeLines(out);
    }
}

void LiveStreamReader::takeLines(std::vector<LiveStreamRecord>& out)
{
    std::size_t start = 0;
    for (std::size_t nl; (nl = m_partial.find('\n', start)) != std::string::npos; start = nl + 1) {
        if (m_skippingLongLine) {
            m_skippingLongLine = false;
            continue;
        }
        try {
            out.push_back(liveStreamRecordFromJson(json::parse(m_partial.begin() + static_cast<std::ptrdiff_t>(start),
                m_partial.begin() + static_cast<std::ptrdiff_t>(nl))));
        } catch (const std::exception&) {
            ++m_skipped;
        }
    }
    m_partial.erase(0, start);
    if (m_skippingLongLine)
        m_partial.clear();
    if (m_partial.size() > m_maxLine) {
        // No newline within the limit: drop this line, whatever of it is still to come included.
        m_partial.clear();
        if (!m_skippingLongLine)
            ++m_skipped;
        m_skippingLongLine = true;
    }
}

void LiveStreamReader::closeFile()
{
    if (m_fd >= 0)
        ::close(m_fd);
    m_fd = -1;
    m_dev = 0;
    m_ino = 0;
    m_offset = 0;
    m_partial.clear();
    m_skippingLongLine = false;
}

} // namespace kl
