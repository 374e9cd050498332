#pragma once
// The Qt-free client of kloop-worker. The transport is a byte stream to a child process's stdin/stdout: the
// worker itself, "ssh host kloop-worker" or "srun --gres=gpu:1 kloop-worker" (kernels/pool/worker_spec.h builds
// those commands). A worker that faults (sticky CUDA error, segfault) or misses a request's deadline is killed and
// restarted; the request reports Crashed or TimedOut and the client carries on with a fresh worker. A worker that
// stays silent through a heartbeat (a ping it does not answer), or a remote one whose connection drops, is Lost.
#include "core/device.h"
#include "kernels/worker_protocol.h"

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <sys/types.h>
#include <vector>

namespace kl {

// One bidirectional byte stream of lines.
class ByteStream {
public:
    virtual ~ByteStream() = default;
    virtual bool writeLine(const std::string& line) = 0;
    // nullopt on deadline; "" with eof() on end of stream.
    virtual std::optional<std::string> readLine(std::chrono::steady_clock::time_point deadline) = 0;
    virtual bool eof() const = 0;
    virtual void kill() = 0; // ends the other side for sure
};

// A child process started with posix_spawn; stderr is inherited (or appended to a log file).
class ChildProcessStream final : public ByteStream {
public:
    ChildProcessStream(const std::vector<std::string>& argv, const std::string& stderrPath = {},
        const std::vector<std::pair<std::string, std::string>>& environment = {});
    ~ChildProcessStream() override;
    bool writeLine(const std::string& line) override;
    std::optional<std::string> readLine(std::chrono::steady_clock::time_point deadline) override;
    bool eof() const override { return m_eof; }
    void kill() override;
    pid_t pid() const { return m_pid; }
    int exitStatus() const { return m_status; } // after kill()/eof, the wait status

private:
    pid_t m_pid = -1;
    int m_in = -1; // we write
    int m_out = -1; // we read
    std::string m_buffer;
    bool m_eof = false;
    int m_status = 0;
};

struct WorkerOptions {
    std::vector<std::string> command; // empty: the kloop-worker found next to this program, KL_WORKER, or the build
    std::string stderrPath; // empty: inherit
    double startTimeoutSeconds = 120;
    std::vector<std::pair<std::string, std::string>> environment; // extra variables for the child
    std::string name = "local"; // the worker's id in messages and records
    bool remote = false; // reached through ssh or srun: a dropped stream is a lost connection, not a crash
    // While a request runs, a worker silent this long is pinged; silent as long again, it is lost. 0: no heartbeat.
    double heartbeatSeconds = 10;
    std::string installHint
        = "scripts/install-deps --no-gui && scripts/build (then kloop-worker is build/kernels/kloop-worker)";
};

std::string defaultWorkerPath();

class WorkerClient {
public:
    enum class Status { Ok, Error, Crashed, TimedOut, Lost };
    struct Reply {
        Status status = Status::Ok;
        nlohmann::json body;
        std::string error;
        bool fatal = false; // Crashed because the worker said its context is gone (the candidate's fault)
        bool ok() const { return status == Status::Ok; }
    };
    // A typed reply: value is set when status is Ok and the body parsed (a malformed body is an Error naming it).
    template <class Req> struct Typed {
        Reply reply;
        std::optional<typename Req::Reply> value;
        bool ok() const { return value.has_value(); }
    };

    explicit WorkerClient(WorkerOptions options = {});
    ~WorkerClient();
    WorkerClient(const WorkerClient&) = delete;
    WorkerClient& operator=(const WorkerClient&) = delete;

    // Starts the worker if it is not running (replaying setup requests); throws std::runtime_error when a fresh
    // worker cannot start at all (no GPU, missing binary).
    void ensureStarted();
    const DeviceInfo& device(); // starts the worker on first use
    bool running() const { return m_stream != nullptr; }

    // Sends one request (an "id" is assigned) and waits up to timeoutSeconds. A crash or timeout kills the
    // worker; the next request starts a new one.
    Reply request(nlohmann::json req, double timeoutSeconds);
    template <class Req> Typed<Req> call(const Req& req, double timeoutSeconds)
    {
        Typed<Req> t { request(wire::toJson(req), timeoutSeconds), std::nullopt };
        if (t.reply.ok()) {
            try {
                t.value = wire::parse<typename Req::Reply>(t.reply.body);
            } catch (const std::exception& e) {
                t.reply.status = Status::Error;
                t.reply.error = std::string("malformed reply from worker ") + m_options.name + ": " + e.what();
            }
        }
        return t;
    }
    // Requests replayed on every fresh worker (load_problem), in order. Sent now if the worker runs.
    Reply addSetup(const nlohmann::json& req, double timeoutSeconds = 300);

    const wire::HelloReply& hello() const { return m_hello; } // the running worker's (or the last one's)
    const WorkerOptions& options() const { return m_options; }
    int starts() const { return m_starts; }
    int lost() const { return m_lost; }
    int crashes() const { return m_crashes; }
    int timeouts() const { return m_timeouts; }
    pid_t pid() const;
    void shutdown();

private:
    Reply roundTrip(nlohmann::json req, double timeoutSeconds);
    Reply dropped(const std::string& op); // the stream ended without an answer
    void killWorker();

    WorkerOptions m_options;
    std::unique_ptr<ChildProcessStream> m_stream;
    DeviceInfo m_device;
    wire::HelloReply m_hello;
    std::vector<nlohmann::json> m_setup;
    std::int64_t m_nextId = 1;
    int m_starts = 0;
    int m_crashes = 0;
    int m_timeouts = 0;
    int m_lost = 0;
};

// The hello said another protocol version: no restart can help, the worker on that host must be replaced.
class WorkerVersionError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

} // namespace kl
