#include "agent/llm/http_client.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#ifdef KL_HAVE_CURL
#include <curl/curl.h>
#endif

namespace kl::llm {

#ifdef KL_HAVE_CURL
namespace {

    using Clock = std::chrono::steady_clock;

    struct Transfer {
        HttpResponse response;
        const BodyChunkFn* onChunk = nullptr;
        Clock::time_point lastByte = Clock::now();
        bool stoppedByCallback = false;
        std::size_t maxBodyBytes = 0;
        bool tooLarge = false;
    };

    std::string lower(std::string s)
    {
        std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
        return s;
    }

    std::string trim(const std::string& s)
    {
        const auto b = s.find_first_not_of(" \t\r\n");
        if (b == std::string::npos)
            return {};
        const auto e = s.find_last_not_of(" \t\r\n");
        return s.substr(b, e - b + 1);
    }

    size_t onHeader(char* data, size_t size, size_t count, void* user)
    {
        auto* t = static_cast<Transfer*>(user);
        t->lastByte = Clock::now();
        const std::string line(data, size * count);
        if (line.rfind("HTTP/", 0) == 0) {
            // A new status line (after 100 Continue or a redirect) starts a new header set.
            t->response.headers.clear();
            const auto sp = line.find(' ');
            t->response.status = sp == std::string::npos ? 0 : std::atoi(line.c_str() + sp + 1);
            return size * count;
        }
        const auto colon = line.find(':');
        if (colon != std::string::npos)
            t->response.headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
        return size * count;
    }

    size_t onBody(char* data, size_t size, size_t count, void* user)
    {
        auto* t = static_cast<Transfer*>(user);
        const size_t n = size * count;
        t->lastByte = Clock::now();
        if (t->maxBodyBytes > 0 && t->response.body.size() + n > t->maxBodyBytes) {
            t->tooLarge = true;
            return 0;
        }
        t->response.body.append(data, n);
        if (t->onChunk && *t->onChunk && t->response.status >= 200 && t->response.status < 300) {
            if (!(*t->onChunk)(data, n)) {
                t->stoppedByCallback = true;
                return 0;
            }
        }
        return n;
    }

    void globalInit()
    {
        static std::once_flag once;
        std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    }

} // namespace

bool httpAvailable()
{
    return true;
}

HttpResult httpPost(const HttpRequest& req, const BodyChunkFn& onChunk, const CancelToken& cancel)
{
    globalInit();
    HttpResult result;
    CURL* easy = curl_easy_init();
    CURLM* multi = curl_multi_init();
    if (!easy || !multi) {
        if (easy)
            curl_easy_cleanup(easy);
        if (multi)
            curl_multi_cleanup(multi);
        result.failure = TransportFailure::Other;
        result.error = "could not initialise libcurl";
        return result;
    }
    Transfer t;
    t.onChunk = &onChunk;
    t.maxBodyBytes = req.maxBodyBytes;
    curl_slist* headers = nullptr;
    for (const auto& [name, value] : req.headers)
        headers = curl_slist_append(headers, (name + ": " + value).c_str());
    // Without this curl waits for "100 Continue" before sending bodies over 1 KiB.
    headers = curl_slist_append(headers, "Expect:");

    char errbuf[CURL_ERROR_SIZE] = { 0 };
    curl_easy_setopt(easy, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L); // required off the main thread
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, req.body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::max(1, req.connectTimeoutMs)));
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &onHeader);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &onBody);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, "KernelLoop");
    curl_easy_setopt(easy, CURLOPT_ACCEPT_ENCODING, ""); // whatever curl can decode
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
    // Local servers (vLLM, llama.cpp, Ollama, the tests' loopback server) must not go through a proxy set in
    // the environment; the user's own no_proxy list still applies.
    std::string noProxy = "localhost,127.0.0.1,::1";
    for (const char* var : { "no_proxy", "NO_PROXY" })
        if (const char* v = std::getenv(var); v && *v) {
            noProxy += std::string(",") + v;
            break;
        }
    curl_easy_setopt(easy, CURLOPT_NOPROXY, noProxy.c_str());
    curl_multi_add_handle(multi, easy);

    const auto idleLimit = std::chrono::milliseconds(std::max(1, req.readTimeoutMs));
    t.lastByte = Clock::now();
    bool cancelled = false;
    bool idle = false;
    int running = 1;
    while (running) {
        if (curl_multi_perform(multi, &running) != CURLM_OK)
            break;
        if (!running)
            break;
        if (cancel.cancelled()) {
            cancelled = true;
            break;
        }
        if (Clock::now() - t.lastByte > idleLimit) {
            idle = true;
            break;
        }
        curl_multi_poll(multi, nullptr, 0, 50, nullptr);
    }

    CURLcode code = CURLE_OK;
    int msgs = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &msgs)) {
        if (m->msg == CURLMSG_DONE && m->easy_handle == easy)
            code = m->data.result;
    }
    curl_multi_remove_handle(multi, easy);
    curl_easy_cleanup(easy);
    curl_multi_cleanup(multi);
    curl_slist_free_all(headers);

    result.response = std::move(t.response);
    if (cancelled) {
        result.failure = TransportFailure::Cancelled;
        result.error = "cancelled";
    } else if (idle) {
        result.failure = TransportFailure::Timeout;
        result.error = "no data for " + std::to_string(req.readTimeoutMs) + " ms (read timeout)";
    } else if (t.tooLarge) {
        result.failure = TransportFailure::TooLarge;
        result.error = "the reply passed the limit of " + std::to_string(req.maxBodyBytes) + " bytes";
    } else if (t.stoppedByCallback) {
        result.failure = TransportFailure::None;
    } else if (code != CURLE_OK) {
        result.error = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(code));
        switch (code) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
            result.failure = TransportFailure::Connect;
            break;
        case CURLE_OPERATION_TIMEDOUT:
            result.failure = result.response.status == 0 ? TransportFailure::Connect : TransportFailure::Timeout;
            break;
        case CURLE_PARTIAL_FILE:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_GOT_NOTHING:
            result.failure = TransportFailure::Dropped;
            break;
        default:
            result.failure = TransportFailure::Other;
        }
    }
    return result;
}

#else

bool httpAvailable()
{
    return false;
}

HttpResult httpPost(const HttpRequest&, const BodyChunkFn&, const CancelToken&)
{
    throw std::runtime_error("this build of KernelLoop has no libcurl: LLM providers are unavailable "
                             "(install libcurl4-openssl-dev and reconfigure)");
}

#endif

} // namespace kl::llm
