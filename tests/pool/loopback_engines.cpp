#include "loopback_engines.h"

#include "tests/support/text_file.h"

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <netinet/in.h>
#include <pwd.h>
#include <sstream>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kl::test {

namespace {

    fs::path makeTempDir(const std::string& prefix)
    {
        std::string templ = (fs::temp_directory_path() / (prefix + "XXXXXX")).string();
        if (!::mkdtemp(templ.data()))
            return {};
        return templ;
    }

    int run(const std::string& command)
    {
        const int rc = std::system(command.c_str());
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    }

    std::string which(const std::string& program)
    {
        for (const char* dir : { "/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin" }) {
            const fs::path p = fs::path(dir) / program;
            if (::access(p.c_str(), X_OK) == 0)
                return p.string();
        }
        return {};
    }

    long pidFrom(const fs::path& pidFile)
    {
        for (int i = 0; i < 100; ++i) {
            std::ifstream in(pidFile);
            long pid = 0;
            if (in >> pid && pid > 0)
                return pid;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return 0;
    }

    void stopPid(long pid)
    {
        if (pid <= 0)
            return;
        ::kill(static_cast<pid_t>(pid), SIGTERM);
        for (int i = 0; i < 50 && ::kill(static_cast<pid_t>(pid), 0) == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ::kill(static_cast<pid_t>(pid), SIGKILL);
    }

    std::string shortHostName()
    {
        char buf[256] = {};
        ::gethostname(buf, sizeof buf - 1);
        std::string h = buf;
        return h.substr(0, h.find('.'));
    }

} // namespace

int freeLoopbackPort()
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0
        && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
        port = ntohs(addr.sin_port);
    ::close(fd);
    return port;
}

std::unique_ptr<LoopbackSshd> LoopbackSshd::start(std::string* whyNot)
{
    const std::string sshd = which("sshd");
    if (sshd.empty() || which("ssh").empty() || which("ssh-keygen").empty()) {
        *whyNot = "no sshd/ssh/ssh-keygen installed (Debian openssh-server, openssh-client: scripts/install-deps)";
        return nullptr;
    }
    // sshd insists on its privilege separation directory even when it runs unprivileged on a private port.
    if (!fs::exists("/run/sshd")) {
        std::error_code ec;
        fs::create_directories("/run/sshd", ec);
        if (ec) {
            *whyNot
                = "sshd needs /run/sshd (its privilege separation directory) and it cannot be created: " + ec.message();
            return nullptr;
        }
    }
    auto d = std::unique_ptr<LoopbackSshd>(new LoopbackSshd);
    d->m_dir = makeTempDir("kl-sshd-");
    const fs::path& dir = d->m_dir;
    if (run("ssh-keygen -q -t ed25519 -N '' -f " + (dir / "host_key").string()
            + " && ssh-keygen -q -t ed25519 -N '' -f " + (dir / "user_key").string() + " && cp "
            + (dir / "user_key.pub").string() + " " + (dir / "authorized_keys").string())
        != 0) {
        *whyNot = "ssh-keygen failed";
        return nullptr;
    }
    d->m_port = freeLoopbackPort();
    std::ofstream(dir / "sshd_config") << "Port " << d->m_port << "\nListenAddress 127.0.0.1\nHostKey "
                                       << (dir / "host_key").string() << "\nAuthorizedKeysFile "
                                       << (dir / "authorized_keys").string() << "\nPidFile "
                                       << (dir / "sshd.pid").string()
                                       << "\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                                          "PubkeyAuthentication yes\nStrictModes no\nUsePAM no\nPermitRootLogin "
                                          "prohibit-password\nMaxStartups 100:30:200\nMaxSessions 200\n";
    std::ofstream(dir / "known_hosts") << "[127.0.0.1]:" << d->m_port << " "
                                       << kl::test::readTextFile(dir / "host_key.pub");
    if (run(sshd + " -f " + (dir / "sshd_config").string() + " -E " + (dir / "sshd.log").string()) != 0) {
        *whyNot = "sshd did not start: " + kl::test::readTextFile(dir / "sshd.log");
        return nullptr;
    }
    d->m_pid = pidFrom(dir / "sshd.pid");
    if (!d->m_pid) {
        *whyNot = "sshd wrote no pid file: " + kl::test::readTextFile(dir / "sshd.log");
        return nullptr;
    }
    return d;
}

LoopbackSshd::~LoopbackSshd()
{
    stopPid(m_pid);
    std::error_code ec;
    fs::remove_all(m_dir, ec);
}

std::vector<std::string> LoopbackSshd::sshOptions() const
{
    return { "-F", "/dev/null", "-i", (m_dir / "user_key").string(), "-o", "IdentitiesOnly=yes", "-o",
        "UserKnownHostsFile=" + (m_dir / "known_hosts").string(), "-o", "StrictHostKeyChecking=yes", "-o",
        "LogLevel=ERROR" };
}

void LoopbackSshd::forgetHostKey() const
{
    std::ofstream(m_dir / "known_hosts", std::ios::trunc);
}

std::unique_ptr<LoopbackSlurm> LoopbackSlurm::start(std::string* whyNot)
{
    const std::string munged = which("munged");
    const std::string ctld = which("slurmctld");
    const std::string slurmd = which("slurmd");
    if (munged.empty() || ctld.empty() || slurmd.empty() || which("srun").empty() || which("sinfo").empty()) {
        *whyNot = "Slurm is not installed (Debian slurmctld, slurmd, slurm-client, munge: scripts/install-deps)";
        return nullptr;
    }
    if (::geteuid() != 0) {
        // slurmd launches job steps through slurmstepd, which must be root to become the job's user.
        *whyNot = "the single-node Slurm runs slurmd, which needs root to launch job steps (CI runs as root)";
        return nullptr;
    }
    auto s = std::unique_ptr<LoopbackSlurm>(new LoopbackSlurm);
    s->m_dir = makeTempDir("kl-slurm-");
    const fs::path& dir = s->m_dir;
    for (const char* sub : { "munge", "state", "spool", "log" })
        fs::create_directories(dir / sub);
    if (run("dd if=/dev/urandom of=" + (dir / "munge/munge.key").string() + " bs=1024 count=1 2>/dev/null && chmod 600 "
            + (dir / "munge/munge.key").string())
        != 0) {
        *whyNot = "cannot write a munge key";
        return nullptr;
    }
    const std::string sock = (dir / "munge/sock").string();
    if (run(munged + " -f --socket=" + sock + " --key-file=" + (dir / "munge/munge.key").string()
            + " --log-file=" + (dir / "log/munged.log").string() + " --pid-file=" + (dir / "munge/munged.pid").string()
            + " --seed-file=" + (dir / "munge/seed").string())
        != 0) {
        *whyNot = "munged did not start: " + kl::test::readTextFile(dir / "log/munged.log");
        return nullptr;
    }
    s->m_pidFiles.push_back(dir / "munge/munged.pid");
    const std::string host = shortHostName();
    const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::ofstream(dir / "slurm.conf")
        << "ClusterName=kltest\nSlurmctldHost=" << host << "(127.0.0.1)\nSlurmctldPort=" << freeLoopbackPort()
        << "\nSlurmdPort=" << freeLoopbackPort() << "\nAuthType=auth/munge\nAuthInfo=socket=" << sock
        << "\nCredType=cred/munge\nSlurmUser=root\nSlurmdUser=root\nStateSaveLocation=" << (dir / "state").string()
        << "\nSlurmdSpoolDir=" << (dir / "spool").string() << "\nSlurmctldPidFile=" << (dir / "slurmctld.pid").string()
        << "\nSlurmdPidFile=" << (dir / "slurmd.pid").string()
        << "\nSlurmctldLogFile=" << (dir / "log/slurmctld.log").string()
        << "\nSlurmdLogFile=" << (dir / "log/slurmd.log").string()
        << "\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
           "AccountingStorageType=accounting_storage/none\nSwitchType=switch/none\nMpiDefault=none\n"
           "SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
           "ReturnToService=2\nGresTypes=gpu\nNodeName="
        << host << " NodeAddr=127.0.0.1 CPUs=" << cpus
        << " RealMemory=1000 Gres=gpu:4 State=UNKNOWN\nPartitionName=" << s->m_partition << " Nodes=" << host
        << " Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8\n";
    // Fake GPUs: the gpu plugin wants a device file per GPU; any character device will do.
    std::ofstream(dir / "gres.conf") << "NodeName=" << host << " Name=gpu File=/dev/null\nNodeName=" << host
                                     << " Name=gpu File=/dev/zero\nNodeName=" << host
                                     << " Name=gpu File=/dev/full\nNodeName=" << host
                                     << " Name=gpu File=/dev/urandom\n";
    ::setenv("SLURM_CONF", (dir / "slurm.conf").c_str(), 1);
    const std::string conf = " -f " + (dir / "slurm.conf").string();
    if (run(ctld + conf) != 0) {
        *whyNot = "slurmctld did not start: " + kl::test::readTextFile(dir / "log/slurmctld.log");
        return nullptr;
    }
    s->m_pidFiles.push_back(dir / "slurmctld.pid");
    if (run(slurmd + conf + " -N " + host) != 0) {
        *whyNot = "slurmd did not start: " + kl::test::readTextFile(dir / "log/slurmd.log");
        return nullptr;
    }
    s->m_pidFiles.push_back(dir / "slurmd.pid");
    for (int i = 0; i < 150; ++i) {
        FILE* p = ::popen("sinfo -h -o %t 2>/dev/null", "r");
        char buf[64] = {};
        const bool got = p && std::fgets(buf, sizeof buf, p);
        if (p)
            ::pclose(p);
        if (got && std::string(buf).rfind("idle", 0) == 0)
            return s;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    *whyNot = "the Slurm node never became idle: " + kl::test::readTextFile(dir / "log/slurmctld.log");
    return nullptr;
}

LoopbackSlurm::~LoopbackSlurm()
{
    for (auto it = m_pidFiles.rbegin(); it != m_pidFiles.rend(); ++it)
        stopPid(pidFrom(*it));
    ::unsetenv("SLURM_CONF");
    std::error_code ec;
    fs::remove_all(m_dir, ec);
}

} // namespace kl::test
