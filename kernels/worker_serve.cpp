#include "kernels/worker_serve.h"

#include "core/errors.h"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace kl::wire {

namespace {

    class Sender {
    public:
        explicit Sender(std::FILE* out)
            : m_out(out)
        {
        }
        void send(const Json& j)
        {
            const std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
            std::lock_guard lock(m_mutex);
            std::fwrite(line.data(), 1, line.size(), m_out);
            std::fflush(m_out);
        }

    private:
        std::FILE* m_out;
        std::mutex m_mutex;
    };

    Json envelope(std::int64_t id, const Json& fields)
    {
        Json j = { { "id", id }, { "ok", true } };
        for (auto it = fields.begin(); it != fields.end(); ++it)
            j[it.key()] = it.value();
        return j;
    }

    template <class Req, class Fn> Json serve(const Json& req, Fn&& fn)
    {
        return toJson(fn(parse<Req>(req)));
    }

    Json dispatch(WorkerHandler& h, const std::string& op, const Json& req, bool* stop)
    {
        if (op == HelloRequest::kOp)
            return serve<HelloRequest>(req, [&](const auto& r) { return h.hello(r); });
        if (op == SampleRequest::kOp)
            return serve<SampleRequest>(req, [&](const auto& r) { return h.sample(r); });
        if (op == LoadProblemRequest::kOp)
            return serve<LoadProblemRequest>(req, [&](const auto& r) { return h.loadProblem(r); });
        if (op == CompileRequest::kOp)
            return serve<CompileRequest>(req, [&](const auto& r) { return h.compile(r); });
        if (op == VerifyRequest::kOp)
            return serve<VerifyRequest>(req, [&](const auto& r) { return h.verify(r); });
        if (op == TimeRequest::kOp)
            return serve<TimeRequest>(req, [&](const auto& r) { return h.time(r); });
        if (op == TraceRequest::kOp)
            return serve<TraceRequest>(req, [&](const auto& r) { return h.trace(r); });
        if (op == ProfileOpRequest::kOp)
            return serve<ProfileOpRequest>(req, [&](const auto& r) { return h.profile(r); });
        if (op == PipelineRequest::kOp)
            return serve<PipelineRequest>(req, [&](const auto& r) { return h.pipeline(r); });
        if (op == ShutdownRequest::kOp) {
            *stop = true;
            return toJson(ShutdownReply {});
        }
        throw InputError("unknown op '" + op + "'");
    }

    // Whole lines from a file descriptor, read in large chunks. std::getline on std::cin (synchronised with C stdio)
    // took 4-6 ms for a 50-75 KB request (the candidate's cubin), which was half of a multi-fidelity screen's time.
    class LineReader {
    public:
        explicit LineReader(int fd)
            : m_fd(fd)
        {
        }
        bool next(std::string& line)
        {
            for (;;) {
                if (const auto nl = m_buffer.find('\n', m_scanned); nl != std::string::npos) {
                    line.assign(m_buffer, 0, nl);
                    m_buffer.erase(0, nl + 1);
                    m_scanned = 0;
                    return true;
                }
                m_scanned = m_buffer.size();
                char chunk[1 << 16];
                const ssize_t n = ::read(m_fd, chunk, sizeof chunk);
                if (n > 0) {
                    m_buffer.append(chunk, static_cast<std::size_t>(n));
                } else if (n < 0 && errno == EINTR) {
                    continue;
                } else { // end of input (or a broken pipe): a last unterminated line still counts
                    if (m_buffer.empty())
                        return false;
                    line = std::move(m_buffer);
                    m_buffer.clear();
                    m_scanned = 0;
                    return true;
                }
            }
        }

    private:
        int m_fd;
        std::string m_buffer;
        std::size_t m_scanned = 0; // bytes of m_buffer already searched for a newline
    };

    struct Busy {
        std::string op;
        std::chrono::steady_clock::time_point since;
    };

} // namespace

void sendStartFailure(std::FILE* protocol, const std::string& why)
{
    Sender(protocol).send({ { "id", 0 }, { "ok", false }, { "fatal", true }, { "error", why } });
}

PipelineReply WorkerHandler::pipeline(const PipelineRequest&)
{
    throw InputError("this worker does not run pipelines");
}

int serveWorker(WorkerHandler& handler, std::FILE* protocol)
{
    Sender out(protocol);
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Json> queue;
    bool inputEnded = false;
    Busy busy;
    out.send({ { "id", 0 }, { "ok", true }, { "op", "ready" } });

    // Reads requests; pings are answered here so they never wait behind a long verify or time.
    std::thread reader([&] {
        std::string line;
        LineReader in(STDIN_FILENO);
        while (in.next(line)) {
            if (line.empty())
                continue;
            Json req;
            try {
                req = Json::parse(line);
                if (!req.is_object() || !req.contains("op") || !req.at("op").is_string())
                    throw InputError("expected an object with a string \"op\"");
            } catch (const std::exception& e) {
                out.send({ { "id", 0 }, { "ok", false }, { "error", std::string("malformed request: ") + e.what() } });
                continue;
            }
            const std::int64_t id = req.value("id", std::int64_t { 0 });
            if (req.at("op") == PingRequest::kOp) {
                PingReply pong;
                {
                    std::lock_guard lock(mutex);
                    pong.busyOp = busy.op;
                    if (!busy.op.empty())
                        pong.busySeconds
                            = std::chrono::duration<double>(std::chrono::steady_clock::now() - busy.since).count();
                }
                out.send(envelope(id, toJson(pong)));
                continue;
            }
            const bool shutdown = req.at("op") == ShutdownRequest::kOp;
            {
                std::lock_guard lock(mutex);
                queue.push_back(std::move(req));
            }
            cv.notify_one();
            if (shutdown)
                break;
        }
        std::lock_guard lock(mutex);
        inputEnded = true;
        cv.notify_one();
    });

    bool stop = false;
    while (!stop) {
        Json req;
        {
            std::unique_lock lock(mutex);
            cv.wait(lock, [&] { return !queue.empty() || inputEnded; });
            if (queue.empty())
                break;
            req = std::move(queue.front());
            queue.pop_front();
            busy = { req.at("op").get<std::string>(), std::chrono::steady_clock::now() };
        }
        const std::int64_t id = req.value("id", std::int64_t { 0 });
        Json reply;
        try {
            reply = envelope(id, dispatch(handler, busy.op, req, &stop));
        } catch (const std::exception& e) {
            if (const auto why = handler.fatal(e)) {
                out.send({ { "id", id }, { "ok", false }, { "fatal", true }, { "crashed", true }, { "error", *why } });
                std::_Exit(4); // the context is unusable; the client starts a fresh worker
            }
            reply = { { "id", id }, { "ok", false }, { "error", e.what() } };
        }
        {
            // Idle before the reply leaves: a ping sent after it must not see the finished request as running.
            std::lock_guard lock(mutex);
            // What an evaluation's device_ms spends in each op, against what the client adds around it.
            std::fprintf(stderr, "[worker] op %s: %.1f ms\n", busy.op.c_str(),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - busy.since).count());
            busy = {};
        }
        out.send(reply);
    }
    reader.join(); // it stops reading after a shutdown, so this never waits on stdin
    return 0;
}

} // namespace kl::wire
