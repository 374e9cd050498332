#pragma once
// Real engines on loopback for the transport tests, started and stopped by the test in a temporary directory:
// an OpenSSH sshd (its own config, host key and a throwaway user key, a free port, running as the current user)
// and a single-node Slurm (munged, slurmctld, slurmd; one node with four fake GPU gres). When an engine cannot
// run here, start() returns nullptr and says exactly why (the caller skips with that reason).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kl::test {

class LoopbackSshd {
public:
    static std::unique_ptr<LoopbackSshd> start(std::string* whyNot);
    ~LoopbackSshd();
    int port() const { return m_port; }
    // Arguments that make ssh use only this test's key and known_hosts (never the user's).
    std::vector<std::string> sshOptions() const;
    const std::filesystem::path& dir() const { return m_dir; }
    void forgetHostKey() const; // an empty known_hosts: the host key is then unknown

private:
    std::filesystem::path m_dir;
    int m_port = 0;
    long m_pid = 0;
};

class LoopbackSlurm {
public:
    static std::unique_ptr<LoopbackSlurm> start(std::string* whyNot);
    ~LoopbackSlurm();
    const std::string& partition() const { return m_partition; }

private:
    std::filesystem::path m_dir;
    std::string m_partition = "kltest";
    std::vector<std::filesystem::path> m_pidFiles;
};

int freeLoopbackPort();

} // namespace kl::test
