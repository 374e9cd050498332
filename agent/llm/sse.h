#pragma once
// Incremental parser for server-sent events (text/event-stream): bytes in, complete events out.
// Follows the WHATWG rules that matter for LLM APIs: "event:" and "data:" fields, several data lines
// joined by '\n', comment lines starting with ':', CR, LF or CRLF line ends, a blank line ends an event.
#include <string>
#include <vector>

namespace kl::llm {

struct SseEvent {
    std::string event; // empty means "message"
    std::string data;
};

class SseParser {
public:
    // Returns the events completed by this chunk.
    std::vector<SseEvent> feed(const char* data, std::size_t size);
    std::vector<SseEvent> feed(const std::string& s) { return feed(s.data(), s.size()); }
    // True when bytes of an unfinished event remain (the stream ended mid-event).
    bool hasPartial() const { return !m_line.empty() || m_hasData || !m_event.empty(); }

private:
    void line(const std::string& l, std::vector<SseEvent>& out);
    std::string m_line;
    bool m_lastWasCr = false;
    std::string m_event;
    std::string m_data;
    bool m_hasData = false;
};

} // namespace kl::llm
