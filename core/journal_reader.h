#pragma once
// The one reader of a session's journal.jsonl (format: core/session_store.h). SessionStore::load reads it to the
// end; the workbench's follow mode keeps the same reader and reads the lines a running writer appends.
// A journal is one event per line, numbered 1, 2, 3 ... with no gap; empty lines are skipped. Only complete lines
// are events: the bytes after the last newline are a line still being written, or one whose writer died in the
// middle of it (the writer cuts such a tail when it reopens the session).
#include "core/events.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>

namespace kl {

class JournalReader {
public:
    explicit JournalReader(std::filesystem::path journal);

    // Hands the events of the complete lines appended since the last call to onEvent, in order, and returns how
    // many. A line that is not an event, an event out of sequence, or an exception from onEvent throws InputError
    // naming the file and line; the reader then stays after the last event handed over.
    std::size_t readAppended(const std::function<void(Event)>& onEvent);

    const std::filesystem::path& path() const { return m_path; }
    std::uint64_t linesRead() const { return m_lines; } // complete lines, empty ones included
    std::size_t unterminatedBytes() const { return m_unterminated; } // after the last complete line, at the last read

private:
    std::filesystem::path m_path;
    std::uint64_t m_offset = 0; // bytes of complete lines consumed
    std::uint64_t m_lines = 0;
    std::uint64_t m_nextSeq = 1;
    std::size_t m_unterminated = 0;
};

} // namespace kl
