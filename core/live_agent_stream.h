#pragma once
// The agent's reply while the provider is still streaming it, for a workbench in another process. The
// journal gets the reply only when it is complete (llm.reply); meanwhile kloop run appends one JSON line per
// streamed chunk to <session>/live/agent-stream.jsonl. It is a view, not a record: written but never fsynced,
// one file per reply (a fresh file replaces the last at each request), bounded in size (a fresh file again,
// starting with a "rotate" line, when it would grow past the limit), and removed when the reply ends. A reader
// that is not there costs nothing; one that misses lines sees the gap in the byte offsets, and the journal's
// llm.reply (which names the same stream) has the whole text.
//
// Lines: {"kind":"begin","stream":S,"call":N,"attempt":M,"provider":P,"model":X}
//        {"kind":"delta","stream":S,"offset":BYTES_BEFORE,"text":T}
//        {"kind":"retry","stream":S,"text":WHY}   (the text so far is void; offsets restart at 0)
//        {"kind":"rotate","stream":S,"offset":BYTES_BEFORE,"call":N,"attempt":M}
//        {"kind":"end","stream":S,"text":"done"|"error"}
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/types.h>
#include <vector>

namespace kl {

struct LiveStreamRecord {
    enum class Kind { Begin, Delta, Retry, Rotate, End };
    Kind kind = Kind::Delta;
    std::string stream; // one reply attempt of one request of one run
    int call = 0; // Begin, Rotate
    int attempt = 0; // Begin, Rotate
    std::string provider; // Begin
    std::string model; // Begin
    std::uint64_t offset = 0; // Delta, Rotate: bytes of the reply streamed before this line
    std::string text; // Delta: the chunk; Retry: why; End: "done" or "error"
};

const char* liveStreamKindName(LiveStreamRecord::Kind k);
nlohmann::json toJson(const LiveStreamRecord& r);
LiveStreamRecord liveStreamRecordFromJson(const nlohmann::json& j); // throws InputError

std::filesystem::path liveAgentStreamPath(const std::filesystem::path& sessionDir);

// Whether a process holds the session's writer lock (kloop run is running on it). Without one, a live stream
// file is what a killed run left behind, not a reply still streaming.
bool sessionHasWriter(const std::filesystem::path& sessionDir);

// Used by the run (one writer per session). Never throws and never blocks on a reader: a failed write only
// stops the live view (error() says why); the journal is unaffected.
class LiveStreamWriter {
public:
    // Removes a file a killed run left behind (there is one writer per session).
    explicit LiveStreamWriter(std::filesystem::path sessionDir, std::size_t maxBytes = 1u << 20);
    ~LiveStreamWriter(); // removes the file
    LiveStreamWriter(const LiveStreamWriter&) = delete;
    LiveStreamWriter& operator=(const LiveStreamWriter&) = delete;

    // Returns the stream's id (unique across runs of the session).
    std::string begin(int call, int attempt, const std::string& provider = {}, const std::string& model = {});
    void delta(const std::string& text);
    void retry(const std::string& why);
    void end(const std::string& how = "done"); // appends the end line and removes the file

    // The LLM agent's journal records drive begin/end: llm.request begins a stream, llm.reply and llm.error end
    // it, and each of those records gets "live_stream": <id> so a reader can match the journal to the stream.
    void observeAgentRecord(nlohmann::json& record);

    std::string currentStream() const;
    std::uint64_t bytesOnDisk() const; // of the current file
    int rotations() const;
    std::string error() const;

private:
    void startFile(const LiveStreamRecord& first); // a fresh file (new inode) holding `first`
    void append(const LiveStreamRecord& r);
    void appendLine(const std::string& line);
    void closeFile(bool remove);

    mutable std::mutex m_mutex;
    std::filesystem::path m_path;
    std::size_t m_maxBytes;
    std::string m_runId;
    int m_fd = -1;
    std::uint64_t m_fileBytes = 0;
    std::string m_stream;
    int m_call = 0;
    int m_attempt = 0;
    std::uint64_t m_offset = 0;
    int m_rotations = 0;
    std::string m_error;
};

// Used by the workbench: returns the complete lines appended since the last poll, following the writer
// across fresh files (it finishes the old one first) and removals; a line still being written waits for
// its newline. Never throws: malformed or oversized lines are skipped and counted.
class LiveStreamReader {
public:
    explicit LiveStreamReader(std::filesystem::path sessionDir, std::size_t maxLineBytes = 1u << 20);
    ~LiveStreamReader();
    LiveStreamReader(const LiveStreamReader&) = delete;
    LiveStreamReader& operator=(const LiveStreamReader&) = delete;

    std::vector<LiveStreamRecord> poll();
    // Treats what the current file holds as read (a stale file of a killed run); later files are read whole.
    void skipCurrent();
    std::size_t skippedLines() const { return m_skipped; }

private:
    void drain(std::vector<LiveStreamRecord>& out);
    void takeLines(std::vector<LiveStreamRecord>& out);
    void closeFile();

    std::filesystem::path m_path;
    std::size_t m_maxLine;
    int m_fd = -1;
    dev_t m_dev = 0;
    ino_t m_ino = 0;
    std::uint64_t m_offset = 0;
    std::string m_partial;
    bool m_skippingLongLine = false;
    std::size_t m_skipped = 0;
};

} // namespace kl
