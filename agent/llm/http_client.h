#pragma once
// A minimal HTTP POST over libcurl for the LLM providers: body chunks are handed to a callback as they
// arrive (server-sent events), the caller's CancelToken stops the transfer within ~50 ms, and the read
// timeout is an idle timeout (no byte for readTimeoutMs), so a long streamed reply never times out while
// it is still producing tokens.
#include "core/cancel.h"

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kl::llm {

struct HttpRequest {
    std::string url;
    std::vector<std::pair<std::string, std::string>> headers; // may carry secrets: never logged
    std::string body;
    int connectTimeoutMs = 10'000;
    int readTimeoutMs = 120'000; // longest silence between two received bytes
    std::size_t maxBodyBytes = 0; // past it the transfer is aborted (TransportFailure::TooLarge); 0: no limit
};

struct HttpResponse {
    int status = 0; // 0 when no status line arrived
    std::map<std::string, std::string> headers; // names lower-cased
    std::string body; // the whole body, also when it was streamed to the callback
};

enum class TransportFailure { None, Connect, Timeout, Dropped, Cancelled, TooLarge, Other };

struct HttpResult {
    HttpResponse response;
    TransportFailure failure = TransportFailure::None;
    std::string error; // curl's message when failure != None
};

// Called with each body chunk of a 2xx response; return false to stop the transfer.
using BodyChunkFn = std::function<bool(const char* data, std::size_t size)>;

// Never throws for network trouble: the result says what happened. Throws std::runtime_error when
// the build has no libcurl.
HttpResult httpPost(const HttpRequest& req, const BodyChunkFn& onChunk, const CancelToken& cancel);

bool httpAvailable();

} // namespace kl::llm
