#pragma once
// The Qt-free client of kloop-worker. The transport is a byte stream to a child process's stdin/stdout, so
// "ssh host kloop-worker" or a cluster scheduler's launcher works by changing the command. A worker that
// faults (sticky CUDA error, segfault) or misses a request's deadline is killed and restarted; the request
// reports Crashed or TimedOut and the client carries on with a fresh worker.
#include "core/device.h"

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
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
};

std::string defaultWorkerPath();

class WorkerClient {
public:
    enum class Status { Ok, Error, Crashed, TimedOut };
    struct Reply {
        Status status = Status::Ok;
        nlohmann::json body;
        std::string error;
        bool ok() const { return status == Status::Ok; }
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
    // Requests replayed on every fresh worker (load_problem), in order. Sent now if the worker runs.
    Reply addSetup(const nlohmann::json& req, double timeoutSeconds = 300);

    int starts() const { return m_starts; }
    int crashes() const { return m_crashes; }
    int timeouts() const { return m_timeouts; }
    pid_t pid() const;
    void shutdown();

private:
    Reply roundTrip(nlohmann::json req, double timeoutSeconds);
    void killWorker();

    WorkerOptions m_options;
    std::unique_ptr<ChildProcessStream> m_stream;
    DeviceInfo m_device;
    std::vector<nlohmann::json> m_setup;
    std::int64_t m_nextId = 1;
    int m_starts = 0;
    int m_crashes = 0;
    int m_timeouts = 0;
};

} // namespace kl
