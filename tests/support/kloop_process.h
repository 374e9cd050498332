#pragma once
// kloop as a child process for the CLI tests: stdout and stderr go to files in a scratch folder (a test can watch
// them while it runs), and a deadline fails the test instead of hanging CI. Needs KLOOP_PATH defined.
#include "tests/support/text_file.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace kl::clitest {

namespace fs = std::filesystem;

struct ProcessResult {
    int exitCode = -1; // -1: killed by a signal or by the deadline
    std::string out;
    std::string err;
    long maxRssKb = 0; // peak resident memory of kloop
};

// kloop as a child process; stdout and stderr go to files in scratch so a test can watch them while it runs.
// Environment overrides with an empty value remove the variable.
class KloopProcess {
public:
    KloopProcess(
        const std::vector<std::string>& args, const std::map<std::string, std::string>& env, const fs::path& scratch)
        : m_outPath(scratch / "kloop.stdout")
        , m_errPath(scratch / "kloop.stderr")
    {
        // KLOOP_UNDER_TEST runs another build of kloop (e.g. main's, to see a regression test fail there).
        const char* other = std::getenv("KLOOP_UNDER_TEST");
        std::vector<std::string> argv { other && *other ? other : KLOOP_PATH };
        argv.insert(argv.end(), args.begin(), args.end());
        std::vector<std::string> envStrings;
        for (char** e = environ; e && *e; ++e) {
            const std::string s = *e;
            if (!env.count(s.substr(0, s.find('='))))
                envStrings.push_back(s);
        }
        for (const auto& [k, v] : env)
            if (!v.empty())
                envStrings.push_back(k + "=" + v);
        std::vector<char*> cargv, cenv;
        for (auto& a : argv)
            cargv.push_back(a.data());
        cargv.push_back(nullptr);
        for (auto& e : envStrings)
            cenv.push_back(e.data());
        cenv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, m_outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_addopen(&fa, 2, m_errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int rc = ::posix_spawn(&m_pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) {
            m_pid = -1;
            m_startError = std::string("cannot start kloop: ") + std::strerror(rc) + "\n";
        }
    }
    ~KloopProcess()
    {
        if (m_pid > 0) {
            ::kill(m_pid, SIGKILL);
            ::waitpid(m_pid, nullptr, 0);
        }
    }
    KloopProcess(const KloopProcess&) = delete;
    KloopProcess& operator=(const KloopProcess&) = delete;

    std::string out() const { return kl::test::readTextFile(m_outPath); }
    std::string err() const { return kl::test::readTextFile(m_errPath); }
    void sendSignal(int sig) const
    {
        if (m_pid > 0)
            ::kill(m_pid, sig);
    }

    // Waits until kloop exits; a hang past the deadline fails the test, not the CI job.
    ProcessResult wait(std::chrono::seconds deadline = std::chrono::seconds(90))
    {
        ProcessResult r;
        r.err = m_startError;
        if (m_pid > 0) {
            const auto until = std::chrono::steady_clock::now() + deadline;
            int status = 0;
            struct rusage usage { };
            for (;;) {
                if (::wait4(m_pid, &status, WNOHANG, &usage) == m_pid)
                    break;
                if (std::chrono::steady_clock::now() > until) {
                    ::kill(m_pid, SIGKILL);
                    ::wait4(m_pid, &status, 0, &usage);
                    r.err += "kloop did not finish within the deadline\n";
                    break;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
            m_pid = -1;
            r.maxRssKb = usage.ru_maxrss;
            if (WIFEXITED(status))
                r.exitCode = WEXITSTATUS(status);
        }
        r.out = kl::test::readTextFile(m_outPath);
        r.err += kl::test::readTextFile(m_errPath);
        return r;
    }

private:
    fs::path m_outPath;
    fs::path m_errPath;
    pid_t m_pid = -1;
    std::string m_startError;
};

inline ProcessResult runKloop(
    const std::vector<std::string>& args, const std::map<std::string, std::string>& env, const fs::path& scratch)
{
    return KloopProcess(args, env, scratch).wait();
}

} // namespace kl::clitest
