#include "core/gpu_run_lock.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <stdexcept>
#include <sys/file.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kl {

namespace {

    std::string safeName(const std::string& key)
    {
        std::string out;
        for (char c : key)
            out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
        return out.empty() ? std::string("0") : out;
    }

    GpuRunHolder readHolder(const fs::path& path)
    {
        GpuRunHolder h;
        std::ifstream in(path);
        std::string pid;
        std::getline(in, pid);
        std::getline(in, h.session);
        h.pid = std::strtol(pid.c_str(), nullptr, 10);
        return h;
    }

} // namespace

fs::path GpuRunLock::lockPath(const std::string& gpuKey)
{
    fs::path dir = "/tmp";
    if (const char* d = std::getenv("KL_GPU_LOCK_DIR"); d && *d)
        dir = d;
    else if (const char* r = std::getenv("XDG_RUNTIME_DIR"); r && *r)
        dir = r;
    return dir / ("kernelloop-gpu-" + safeName(gpuKey) + ".lock");
}

std::optional<GpuRunLock> GpuRunLock::tryAcquire(
    const std::string& gpuKey, const std::string& session, GpuRunHolder* holder)
{
    const fs::path path = lockPath(gpuKey);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        throw std::runtime_error("cannot create the GPU lock " + path.string() + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        ::close(fd);
        if (err != EWOULDBLOCK)
            throw std::runtime_error("cannot lock " + path.string() + ": " + std::strerror(err));
        if (holder)
            *holder = readHolder(path);
        return std::nullopt;
    }
    // Who holds it, for the message a second run prints and for the workbench to follow.
    const std::string text = std::to_string(::getpid()) + "\n" + session + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
        ::close(fd);
        throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(errno));
    }
    return GpuRunLock(fd);
}

std::optional<GpuRunHolder> GpuRunLock::holder(const std::string& gpuKey)
{
    const fs::path path = lockPath(gpuKey);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return std::nullopt;
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    if (!held)
        return std::nullopt;
    return readHolder(path);
}

GpuRunLock::GpuRunLock(GpuRunLock&& other) noexcept
    : m_fd(other.m_fd)
{
    other.m_fd = -1;
}

GpuRunLock& GpuRunLock::operator=(GpuRunLock&& other) noexcept
{
    if (this != &other) {
        if (m_fd >= 0)
            ::close(m_fd);
        m_fd = other.m_fd;
        other.m_fd = -1;
    }
    return *this;
}

GpuRunLock::~GpuRunLock()
{
    if (m_fd >= 0)
        ::close(m_fd); // releases the flock
}

std::string localGpuKey()
{
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
        std::string first(v);
        first = first.substr(0, first.find(','));
        if (!first.empty())
            return first;
    }
    return "0";
}

} // namespace kl
