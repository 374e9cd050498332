#pragma once
// A real HTTP/1.1 server on 127.0.0.1 for the LLM tests: each request takes the next scripted
// response (status, headers, body pieces with delays, chunked streaming, dropped connections).
// Requests are recorded for assertions. Nothing leaves the loopback interface.
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kl::test {

struct ScriptedChunk {
    std::string bytes;
    int delayMs = 0; // wait before sending these bytes
};

struct ScriptedResponse {
    int status = 200;
    std::vector<std::pair<std::string, std::string>> headers;
    std::vector<ScriptedChunk> chunks;
    bool chunked = false; // Transfer-Encoding: chunked, as streaming servers send
    int delayBeforeHeadersMs = 0;
    bool closeWithoutReply = false; // read the request, then hang up
    bool dropMidBody = false; // send the chunks, then hang up without finishing the body
};

struct RecordedRequest {
    std::string method;
    std::string path;
    std::map<std::string, std::string> headers; // lower-case names
    std::string body;
};

class LoopbackServer {
public:
    LoopbackServer();
    ~LoopbackServer();
    LoopbackServer(const LoopbackServer&) = delete;
    LoopbackServer& operator=(const LoopbackServer&) = delete;

    int port() const { return m_port; }
    std::string baseUrl() const { return "http://127.0.0.1:" + std::to_string(m_port) + "/v1"; }
    void enqueue(ScriptedResponse r);
    std::vector<RecordedRequest> requests() const;
    std::size_t pendingResponses() const;

private:
    void acceptLoop();
    void serve(int fd);
    bool sleepUnlessStopping(int ms) const;

    int m_listenFd = -1;
    int m_port = 0;
    std::atomic<bool> m_stop { false };
    mutable std::mutex m_mutex;
    std::deque<ScriptedResponse> m_script;
    std::vector<RecordedRequest> m_requests;
    std::vector<std::thread> m_workers;
    std::thread m_acceptThread;
};

// Builders for the two APIs.
ScriptedResponse jsonResponse(
    int status, const std::string& body, std::vector<std::pair<std::string, std::string>> headers = {});
ScriptedResponse openAiStream(
    const std::vector<std::string>& pieces, int promptTokens = 100, int completionTokens = 50, int delayMsPerPiece = 0);
ScriptedResponse openAiWhole(const std::string& text, int promptTokens = 100, int completionTokens = 50);
ScriptedResponse anthropicStream(
    const std::vector<std::string>& pieces, int inputTokens = 100, int outputTokens = 50, int delayMsPerPiece = 0);
ScriptedResponse anthropicWhole(const std::string& text, int inputTokens = 100, int outputTokens = 50);
// Splits text into pieces of at most n bytes (streams carry many small deltas).
std::vector<std::string> piecesOf(const std::string& text, std::size_t n = 17);

} // namespace kl::test
