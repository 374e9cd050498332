#include "agent/llm/sse.h"

namespace kl::llm {

std::vector<SseEvent> SseParser::feed(const char* data, std::size_t size)
{
    std::vector<SseEvent> out;
    for (std::size_t i = 0; i < size; ++i) {
        const char c = data[i];
        if (c == '\n' && m_lastWasCr) {
            m_lastWasCr = false; // the LF of a CRLF pair
            continue;
        }
        m_lastWasCr = c == '\r';
        if (c == '\r' || c == '\n') {
            line(m_line, out);
            m_line.clear();
        } else {
            m_line.push_back(c);
        }
    }
    return out;
}

void SseParser::line(const std::string& l, std::vector<SseEvent>& out)
{
    if (l.empty()) {
        if (m_hasData)
            out.push_back({ m_event, m_data });
        m_event.clear();
        m_data.clear();
        m_hasData = false;
        return;
    }
    if (l[0] == ':')
        return;
    const auto colon = l.find(':');
    std::string field = colon == std::string::npos ? l : l.substr(0, colon);
    std::string value = colon == std::string::npos ? std::string() : l.substr(colon + 1);
    if (!value.empty() && value[0] == ' ')
        value.erase(0, 1);
    if (field == "event") {
        m_event = value;
    } else if (field == "data") {
        if (m_hasData)
            m_data.push_back('\n');
        m_data += value;
        m_hasData = true;
    }
    // "id" and "retry" do not matter for one-shot completions.
}

} // namespace kl::llm
