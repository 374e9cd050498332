#include "loopback_server.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace kl::test {

namespace {

    bool sendAll(int fd, const std::string& s)
    {
        std::size_t off = 0;
        while (off < s.size()) {
            const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (n <= 0) {
                if (n < 0 && errno == EINTR)
                    continue;
                return false;
            }
            off += std::size_t(n);
        }
        return true;
    }

    std::string lower(std::string s)
    {
        for (auto& c : s)
            c = char(std::tolower(static_cast<unsigned char>(c)));
        return s;
    }

    std::string reasonPhrase(int status)
    {
        switch (status) {
        case 200:
            return "OK";
        case 400:
            return "Bad Request";
        case 401:
            return "Unauthorized";
        case 403:
            return "Forbidden";
        case 404:
            return "Not Found";
        case 429:
            return "Too Many Requests";
        case 500:
            return "Internal Server Error";
        case 502:
            return "Bad Gateway";
        case 503:
            return "Service Unavailable";
        case 529:
            return "Overloaded";
        default:
            return "Status";
        }
    }

} // namespace

LoopbackServer::LoopbackServer()
{
    m_listenFd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (m_listenFd < 0)
        throw std::runtime_error("socket() failed");
    int one = 1;
    ::setsockopt(m_listenFd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(m_listenFd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(m_listenFd, 16) != 0)
        throw std::runtime_error("bind/listen on 127.0.0.1 failed");
    socklen_t len = sizeof addr;
    ::getsockname(m_listenFd, reinterpret_cast<sockaddr*>(&addr), &len);
    m_port = ntohs(addr.sin_port);
    m_acceptThread = std::thread([this] { acceptLoop(); });
}

LoopbackServer::~LoopbackServer()
{
    m_stop = true;
    if (m_acceptThread.joinable())
        m_acceptThread.join();
    for (auto& t : m_workers)
        if (t.joinable())
            t.join();
    ::close(m_listenFd);
}

void LoopbackServer::enqueue(ScriptedResponse r)
{
    std::lock_guard lock(m_mutex);
    m_script.push_back(std::move(r));
}

std::vector<RecordedRequest> LoopbackServer::requests() const
{
    std::lock_guard lock(m_mutex);
    return m_requests;
}

std::size_t LoopbackServer::pendingResponses() const
{
    std::lock_guard lock(m_mutex);
    return m_script.size();
}

bool LoopbackServer::sleepUnlessStopping(int ms) const
{
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
        if (m_stop)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return !m_stop;
}

void LoopbackServer::acceptLoop()
{
    while (!m_stop) {
        pollfd p { m_listenFd, POLLIN, 0 };
        if (::poll(&p, 1, 20) <= 0)
            continue;
        const int fd = ::accept(m_listenFd, nullptr, nullptr);
        if (fd < 0)
            continue;
        std::lock_guard lock(m_mutex);
        m_workers.emplace_back([this, fd] {
            serve(fd);
            ::close(fd);
        });
    }
}

void LoopbackServer::serve(int fd)
{
    // Read the request head, then the body by Content-Length.
    std::string buf;
    char tmp[4096];
    std::size_t headEnd = std::string::npos;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    auto readMore = [&]() {
        while (!m_stop && std::chrono::steady_clock::now() < deadline) {
            pollfd p { fd, POLLIN, 0 };
            if (::poll(&p, 1, 20) <= 0)
                continue;
            const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
            if (n <= 0)
                return false;
            buf.append(tmp, std::size_t(n));
            return true;
        }
        return false;
    };
    while ((headEnd = buf.find("\r\n\r\n")) == std::string::npos)
        if (!readMore())
            return;
    RecordedRequest req;
    const std::string head = buf.substr(0, headEnd);
    std::size_t lineEnd = head.find("\r\n");
    const std::string requestLine = head.substr(0, lineEnd);
    const auto sp1 = requestLine.find(' ');
    const auto sp2 = requestLine.find(' ', sp1 + 1);
    req.method = requestLine.substr(0, sp1);
    req.path = requestLine.substr(sp1 + 1, sp2 - sp1 - 1);
    std::size_t pos = lineEnd == std::string::npos ? head.size() : lineEnd + 2;
    while (pos < head.size()) {
        auto e = head.find("\r\n", pos);
        if (e == std::string::npos)
            e = head.size();
        const std::string line = head.substr(pos, e - pos);
        const auto colon = line.find(':');
        if (colon != std::string::npos) {
            std::string v = line.substr(colon + 1);
            while (!v.empty() && v.front() == ' ')
                v.erase(0, 1);
            req.headers[lower(line.substr(0, colon))] = v;
        }
        pos = e + 2;
    }
    std::size_t contentLength = 0;
    if (auto it = req.headers.find("content-length"); it != req.headers.end())
        contentLength = std::stoul(it->second);
    if (auto it = req.headers.find("expect"); it != req.headers.end() && lower(it->second) == "100-continue")
        sendAll(fd, "HTTP/1.1 100 Continue\r\n\r\n");
    while (buf.size() - (headEnd + 4) < contentLength)
        if (!readMore())
            return;
    req.body = buf.substr(headEnd + 4, contentLength);

    ScriptedResponse r;
    {
        std::lock_guard lock(m_mutex);
        m_requests.push_back(req);
        if (m_script.empty()) {
            r = jsonResponse(500, R"({"error":{"message":"loopback server: no scripted response left"}})");
        } else {
            r = std::move(m_script.front());
            m_script.pop_front();
        }
    }
    if (r.closeWithoutReply)
        return;
    if (!sleepUnlessStopping(r.delayBeforeHeadersMs))
        return;
    std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reasonPhrase(r.status) + "\r\n";
    for (const auto& [k, v] : r.headers)
        out += k + ": " + v + "\r\n";
    std::size_t total = 0;
    for (const auto& c : r.chunks)
        total += c.bytes.size();
    if (r.chunked)
        out += "Transfer-Encoding: chunked\r\n";
    else
        out += "Content-Length: " + std::to_string(total) + "\r\n";
    out += "Connection: close\r\n\r\n";
    if (!sendAll(fd, out))
        return;
    for (const auto& c : r.chunks) {
        if (!sleepUnlessStopping(c.delayMs))
            return;
        if (c.bytes.empty())
            continue;
        std::string piece = c.bytes;
        if (r.chunked) {
            char size[32];
            std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
            piece = size + piece + "\r\n";
        }
        if (!sendAll(fd, piece))
            return;
    }
    if (r.dropMidBody) {
        ::shutdown(fd, SHUT_RDWR);
        return;
    }
    if (r.chunked)
        sendAll(fd, "0\r\n\r\n");
    ::shutdown(fd, SHUT_WR);
    // Let the client read everything and close first.
    pollfd p { fd, POLLIN, 0 };
    ::poll(&p, 1, 200);
}

ScriptedResponse jsonResponse(
    int status, const std::string& body, std::vector<std::pair<std::string, std::string>> headers)
{
    ScriptedResponse r;
    r.status = status;
    r.headers = std::move(headers);
    r.headers.emplace_back("Content-Type", "application/json");
    r.chunks.push_back({ body, 0 });
    return r;
}

std::vector<std::string> piecesOf(const std::string& text, std::size_t n)
{
    std::vector<std::string> out;
    for (std::size_t i = 0; i < text.size(); i += n)
        out.push_back(text.substr(i, n));
    return out;
}

ScriptedResponse openAiStream(
    const std::vector<std::string>& pieces, int promptTokens, int completionTokens, int delayMsPerPiece)
{
    using nlohmann::json;
    ScriptedResponse r;
    r.chunked = true;
    r.headers.emplace_back("Content-Type", "text/event-stream");
    auto chunk = [](const json& j) { return "data: " + j.dump() + "\n\n"; };
    r.chunks.push_back({ chunk({ { "id", "x" }, { "model", "loop-model" },
                             { "choices", { { { "index", 0 }, { "delta", { { "role", "assistant" } } } } } } }),
        0 });
    for (const auto& p : pieces)
        r.chunks.push_back({ chunk({ { "model", "loop-model" },
                                 { "choices", { { { "index", 0 }, { "delta", { { "content", p } } } } } } }),
            delayMsPerPiece });
    r.chunks.push_back(
        { chunk({ { "model", "loop-model" },
              { "choices", { { { "index", 0 }, { "delta", json::object() }, { "finish_reason", "stop" } } } } }),
            0 });
    r.chunks.push_back({ chunk({ { "model", "loop-model" }, { "choices", json::array() },
                             { "usage",
                                 { { "prompt_tokens", promptTokens }, { "completion_tokens", completionTokens },
                                     { "prompt_tokens_details", { { "cached_tokens", promptTokens / 2 } } } } } }),
        0 });
    r.chunks.push_back({ "data: [DONE]\n\n", 0 });
    return r;
}

ScriptedResponse openAiWhole(const std::string& text, int promptTokens, int completionTokens)
{
    nlohmann::json j = { { "id", "x" }, { "model", "loop-model" },
        { "choices",
            { { { "index", 0 }, { "message", { { "role", "assistant" }, { "content", text } } },
                { "finish_reason", "stop" } } } },
        { "usage", { { "prompt_tokens", promptTokens }, { "completion_tokens", completionTokens } } } };
    return jsonResponse(200, j.dump());
}

ScriptedResponse anthropicStream(
    const std::vector<std::string>& pieces, int inputTokens, int outputTokens, int delayMsPerPiece)
{
    using nlohmann::json;
    ScriptedResponse r;
    r.chunked = true;
    r.headers.emplace_back("Content-Type", "text/event-stream");
    auto ev = [](const std::string& name, const json& j) {
        return "event: " + name + "\r\ndata: " + j.dump() + "\r\n\r\n";
    };
    r.chunks.push_back(
        { ev("message_start",
              { { "type", "message_start" },
                  { "message",
                      { { "id", "m" }, { "model", "loop-claude" },
                          { "usage", { { "input_tokens", inputTokens }, { "output_tokens", 1 } } } } } }),
            0 });
    r.chunks.push_back({ ev("content_block_start",
                             { { "type", "content_block_start" }, { "index", 0 },
                                 { "content_block", { { "type", "text" }, { "text", "" } } } }),
        0 });
    r.chunks.push_back({ "event: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n", 0 });
    for (const auto& p : pieces)
        r.chunks.push_back({ ev("content_block_delta",
                                 { { "type", "content_block_delta" }, { "index", 0 },
                                     { "delta", { { "type", "text_delta" }, { "text", p } } } }),
            delayMsPerPiece });
    r.chunks.push_back({ ev("content_block_stop", { { "type", "content_block_stop" }, { "index", 0 } }), 0 });
    r.chunks.push_back({ ev("message_delta",
                             { { "type", "message_delta" }, { "delta", { { "stop_reason", "end_turn" } } },
                                 { "usage", { { "output_tokens", outputTokens } } } }),
        0 });
    r.chunks.push_back({ ev("message_stop", { { "type", "message_stop" } }), 0 });
    return r;
}

ScriptedResponse anthropicWhole(const std::string& text, int inputTokens, int outputTokens)
{
    nlohmann::json j = { { "id", "m" }, { "type", "message" }, { "model", "loop-claude" },
        { "content", { { { "type", "text" }, { "text", text } } } }, { "stop_reason", "end_turn" },
        { "usage", { { "input_tokens", inputTokens }, { "output_tokens", outputTokens } } } };
    return jsonResponse(200, j.dump());
}

} // namespace kl::test
