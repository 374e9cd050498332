#include "kernels/worker_client.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <spawn.h>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#ifndef KL_WORKER_BUILD_PATH
#define KL_WORKER_BUILD_PATH ""
#endif

namespace kl {

namespace {
    std::vector<std::string> currentEnvironment(const std::vector<std::pair<std::string, std::string>>& extra)
    {
        std::vector<std::string> env;
        for (char** e = environ; e && *e; ++e) {
            std::string s = *e;
            bool overridden = false;
            for (const auto& [k, v] : extra)
                if (s.rfind(k + "=", 0) == 0)
                    overridden = true;
            if (!overridden)
                env.push_back(s);
        }
        for (const auto& [k, v] : extra)
            env.push_back(k + "=" + v);
        return env;
    }
} // namespace

ChildProcessStream::ChildProcessStream(const std::vector<std::string>& argv, const std::string& stderrPath,
    const std::vector<std::pair<std::string, std::string>>& environment)
{
    if (argv.empty())
        throw std::runtime_error("no worker command");
    int toChild[2], fromChild[2];
    if (::pipe2(toChild, O_CLOEXEC) != 0 || ::pipe2(fromChild, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, toChild[0], 0);
    posix_spawn_file_actions_adddup2(&fa, fromChild[1], 1);
    if (!stderrPath.empty())
        posix_spawn_file_actions_addopen(&fa, 2, stderrPath.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    std::vector<char*> args;
    for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const auto envStrings = currentEnvironment(environment);
    std::vector<char*> envp;
    for (const auto& e : envStrings)
        envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const int rc = ::posix_spawnp(&m_pid, args[0], &fa, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(toChild[0]);
    ::close(fromChild[1]);
    if (rc != 0) {
        ::close(toChild[1]);
        ::close(fromChild[0]);
        throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
    }
    m_in = toChild[1];
    m_out = fromChild[0];
}

ChildProcessStream::~ChildProcessStream()
{
    kill();
}

bool ChildProcessStream::writeLine(const std::string& line)
{
    std::string data = line + "\n";
    const char* p = data.data();
    std::size_t left = data.size();
    while (left > 0) {
        const ssize_t n = ::write(m_in, p, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
    return true;
}

std::optional<std::string> ChildProcessStream::readLine(std::chrono::steady_clock::time_point deadline)
{
    for (;;) {
        const auto nl = m_buffer.find('\n');
        if (nl != std::string::npos) {
            std::string line = m_buffer.substr(0, nl);
            m_buffer.erase(0, nl + 1);
            return line;
        }
        if (m_eof)
            return std::string();
        const auto left
            = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0)
            return std::nullopt;
        pollfd pfd { m_out, POLLIN, 0 };
        const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (pr < 0 && errno != EINTR)
            return std::nullopt;
        if (pr <= 0)
            continue;
        char buf[65536];
        const ssize_t n = ::read(m_out, buf, sizeof(buf));
        if (n > 0)
            m_buffer.append(buf, static_cast<std::size_t>(n));
        else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            m_eof = true;
    }
}

void ChildProcessStream::kill()
{
    if (m_in >= 0) {
        ::close(m_in);
        m_in = -1;
    }
    if (m_pid > 0) {
        ::kill(m_pid, SIGKILL);
        int status = 0;
        while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) { }
        m_status = status;
        m_pid = -1;
    }
    if (m_out >= 0) {
        ::close(m_out);
        m_out = -1;
    }
    m_eof = true;
}

std::string defaultWorkerPath()
{
    if (const char* env = std::getenv("KL_WORKER"))
        return env;
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        for (const auto& candidate :
            { self.parent_path() / "kloop-worker", self.parent_path().parent_path() / "kernels" / "kloop-worker" })
            if (std::filesystem::exists(candidate, ec))
                return candidate.string();
    }
    if (std::string(KL_WORKER_BUILD_PATH).size() && std::filesystem::exists(KL_WORKER_BUILD_PATH, ec))
        return KL_WORKER_BUILD_PATH;
    return "kloop-worker";
}

WorkerClient::WorkerClient(WorkerOptions options)
    : m_options(std::move(options))
{
    if (m_options.command.empty())
        m_options.command = { defaultWorkerPath() };
}

WorkerClient::~WorkerClient()
{
    shutdown();
}

pid_t WorkerClient::pid() const
{
    return m_stream ? m_stream->pid() : -1;
}

void WorkerClient::killWorker()
{
    if (m_stream)
        m_stream->kill();
    m_stream.reset();
}

void WorkerClient::shutdown()
{
    if (!m_stream)
        return;
    nlohmann::json req = wire::toJson(wire::ShutdownRequest {});
    req["id"] = m_nextId++;
    m_stream->writeLine(req.dump());
    // Give it a moment to release the context cleanly, then make sure it is gone.
    m_stream->readLine(std::chrono::steady_clock::now() + std::chrono::seconds(5));
    killWorker();
}

void WorkerClient::ensureStarted()
{
    if (m_stream)
        return;
    m_stream = std::make_unique<ChildProcessStream>(m_options.command, m_options.stderrPath, m_options.environment);
    ++m_starts;
    const auto deadline = std::chrono::steady_clock::now()
        + std::chrono::milliseconds(static_cast<long long>(m_options.startTimeoutSeconds * 1000));
    auto ready = m_stream->readLine(deadline);
    nlohmann::json j;
    try {
        if (ready && !ready->empty())
            j = nlohmann::json::parse(*ready);
    } catch (const std::exception&) {
    }
    if (!j.is_object() || !j.value("ok", false)) {
        std::string why = j.is_object() ? j.value("error", "no ready line") : "worker exited before it was ready";
        if (!ready)
            why = "no ready line within " + std::to_string(static_cast<int>(m_options.startTimeoutSeconds)) + " s";
        killWorker();
        throw std::runtime_error("kloop-worker " + m_options.name + " did not start: " + why);
    }
    auto hello = call(wire::HelloRequest {}, m_options.startTimeoutSeconds);
    if (!hello.ok()) {
        killWorker();
        throw std::runtime_error("kloop-worker " + m_options.name + " hello failed: " + hello.reply.error);
    }
    m_hello = *hello.value;
    if (const std::string why = wire::versionMismatch(m_hello, m_options.name, m_options.installHint); !why.empty()) {
        killWorker();
        throw WorkerVersionError(why);
    }
    m_device = m_hello.device;
    for (const auto& s : m_setup) {
        Reply r = roundTrip(s, 300);
        if (!r.ok()) {
            killWorker();
            throw std::runtime_error("kloop-worker " + m_options.name + " setup request failed: " + r.error);
        }
    }
}

const DeviceInfo& WorkerClient::device()
{
    ensureStarted();
    return m_device;
}

WorkerClient::Reply WorkerClient::dropped(const std::string& op)
{
    Reply reply;
    m_stream->kill();
    const int st = m_stream->exitStatus();
    const std::string how = WIFSIGNALED(st) ? " (signal " + std::to_string(WTERMSIG(st)) + ")"
                                            : " (exit " + std::to_string(WEXITSTATUS(st)) + ")";
    if (m_options.remote) {
        reply.status = Status::Lost;
        reply.error = "connection to worker " + m_options.name + " dropped during op " + op + how;
        ++m_lost;
    } else {
        reply.status = Status::Crashed;
        reply.error = "worker exited during op " + op + how;
        ++m_crashes;
    }
    killWorker();
    return reply;
}

WorkerClient::Reply WorkerClient::roundTrip(nlohmann::json req, double timeoutSeconds)
{
    using Clock = std::chrono::steady_clock;
    Reply reply;
    const std::int64_t id = m_nextId++;
    req["id"] = id;
    const std::string op = req.value("op", "");
    if (!m_stream->writeLine(req.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)))
        return dropped(op);
    const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<long long>(timeoutSeconds * 1000));
    const auto beat = std::chrono::milliseconds(static_cast<long long>(m_options.heartbeatSeconds * 1000));
    auto heard = Clock::now();
    bool pinged = false;
    for (;;) {
        auto wakeUp = deadline;
        if (beat.count() > 0)
            wakeUp = std::min(deadline, heard + (pinged ? 2 * beat : beat));
        auto line = m_stream->readLine(wakeUp);
        if (!line) {
            // readLine rounds what is left down to milliseconds: within 1 ms of a time counts as reaching it.
            const auto now = Clock::now() + std::chrono::milliseconds(1);
            if (now >= deadline) {
                reply.status = Status::TimedOut;
                reply.error = "no answer within " + std::to_string(timeoutSeconds) + " s (op " + op + "); worker "
                    + m_options.name + " killed";
                ++m_timeouts;
                killWorker();
                return reply;
            }
            if (beat.count() <= 0 || now < heard + (pinged ? 2 * beat : beat))
                continue; // woke early (a poll interrupted): nothing is due yet
            if (pinged) {
                reply.status = Status::Lost;
                reply.error = "worker " + m_options.name + " answered no heartbeat for "
                    + std::to_string(static_cast<int>(2 * m_options.heartbeatSeconds)) + " s during op " + op;
                ++m_lost;
                killWorker();
                return reply;
            }
            nlohmann::json ping = wire::toJson(wire::PingRequest {});
            ping["id"] = m_nextId++;
            if (!m_stream->writeLine(ping.dump()))
                return dropped(op);
            pinged = true;
            continue;
        }
        if (line->empty() && m_stream->eof())
            return dropped(op);
        heard = Clock::now();
        pinged = false;
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(*line);
        } catch (const std::exception& e) {
            continue; // not a protocol line; the worker keeps stdout clean, so this is noise
        }
        if (!j.is_object() || j.value("id", std::int64_t { -1 }) != id)
            continue; // a heartbeat's answer, or a late answer to a request we gave up on
        reply.body = j;
        if (j.value("ok", false)) {
            reply.status = Status::Ok;
        } else if (j.value("fatal", false)) {
            reply.status = Status::Crashed;
            reply.fatal = true;
            reply.error = j.value("error", "fatal worker error");
            ++m_crashes;
            killWorker();
        } else {
            reply.status = Status::Error;
            reply.error = j.value("error", "worker error");
        }
        return reply;
    }
}

WorkerClient::Reply WorkerClient::request(nlohmann::json req, double timeoutSeconds)
{
    try {
        ensureStarted();
    } catch (const std::exception& e) {
        Reply r;
        r.status = Status::Error;
        r.error = e.what();
        return r;
    }
    return roundTrip(std::move(req), timeoutSeconds);
}

WorkerClient::Reply WorkerClient::addSetup(const nlohmann::json& req, double timeoutSeconds)
{
    m_setup.push_back(req);
    if (!m_stream) {
        Reply r;
        r.status = Status::Ok;
        return r;
    }
    return roundTrip(req, timeoutSeconds);
}

} // namespace kl
