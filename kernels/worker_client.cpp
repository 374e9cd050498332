#include "kernels/worker_client.h"

#include "kernels/worker_protocol.h"

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
    m_stream->writeLine(nlohmann::json { { "id", m_nextId++ }, { "op", "shutdown" } }.dump());
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
        const std::string why = j.is_object() ? j.value("error", "no ready line") : "worker exited before it was ready";
        killWorker();
        throw std::runtime_error("kloop-worker did not start: " + why);
    }
    Reply hello = roundTrip({ { "op", "hello" } }, m_options.startTimeoutSeconds);
    if (!hello.ok()) {
        killWorker();
        throw std::runtime_error("kloop-worker hello failed: " + hello.error);
    }
    m_device = wire::deviceInfo(hello.body.at("device"));
    for (const auto& s : m_setup) {
        Reply r = roundTrip(s, 300);
        if (!r.ok()) {
            killWorker();
            throw std::runtime_error("kloop-worker setup request failed: " + r.error);
        }
    }
}

const DeviceInfo& WorkerClient::device()
{
    ensureStarted();
    return m_device;
}

WorkerClient::Reply WorkerClient::roundTrip(nlohmann::json req, double timeoutSeconds)
{
    Reply reply;
    const std::int64_t id = m_nextId++;
    req["id"] = id;
    if (!m_stream->writeLine(req.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))) {
        reply.status = Status::Crashed;
        reply.error = "worker pipe closed";
        ++m_crashes;
        killWorker();
        return reply;
    }
    const auto deadline
        = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long long>(timeoutSeconds * 1000));
    for (;;) {
        auto line = m_stream->readLine(deadline);
        if (!line) {
            reply.status = Status::TimedOut;
            reply.error = "no answer within " + std::to_string(timeoutSeconds) + " s (op " + req.value("op", "")
                + "); worker killed";
            ++m_timeouts;
            killWorker();
            return reply;
        }
        if (line->empty() && m_stream->eof()) {
            m_stream->kill();
            const int st = m_stream->exitStatus();
            reply.status = Status::Crashed;
            reply.error = "worker exited during op " + req.value("op", "")
                + (WIFSIGNALED(st) ? " (signal " + std::to_string(WTERMSIG(st)) + ")"
                                   : " (exit " + std::to_string(WEXITSTATUS(st)) + ")");
            ++m_crashes;
            killWorker();
            return reply;
        }
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(*line);
        } catch (const std::exception& e) {
            continue; // not a protocol line; the worker keeps stdout clean, so this is noise
        }
        if (j.value("id", std::int64_t { -1 }) != id)
            continue; // a late answer to a request we gave up on
        reply.body = j;
        if (j.value("ok", false)) {
            reply.status = Status::Ok;
        } else if (j.value("fatal", false)) {
            reply.status = Status::Crashed;
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
