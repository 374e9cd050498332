#pragma once
// One tuning run per local GPU. Two runs sharing a GPU time each other's kernels and both record contaminated
// medians without a warning, so `kloop run` holds this lock for its lifetime and the workbench follows the holder's
// session instead of starting a second run. An advisory flock on a file per GPU: it dies with the process, kill -9
// included. Where it lives: $KL_GPU_LOCK_DIR, else $XDG_RUNTIME_DIR, else /tmp.
#include <filesystem>
#include <optional>
#include <string>

namespace kl {

struct GpuRunHolder {
    long pid = 0;
    std::string session; // the session directory the holder is writing
};

class GpuRunLock {
public:
    GpuRunLock(GpuRunLock&& other) noexcept;
    GpuRunLock& operator=(GpuRunLock&& other) noexcept;
    GpuRunLock(const GpuRunLock&) = delete;
    GpuRunLock& operator=(const GpuRunLock&) = delete;
    ~GpuRunLock();

    // Takes the GPU for `session`, or returns nothing and fills *holder with who has it. Throws std::runtime_error
    // when the lock file cannot be created at all.
    static std::optional<GpuRunLock> tryAcquire(
        const std::string& gpuKey, const std::string& session, GpuRunHolder* holder);
    // Who holds the GPU now, if anyone.
    static std::optional<GpuRunHolder> holder(const std::string& gpuKey);
    static std::filesystem::path lockPath(const std::string& gpuKey);

private:
    explicit GpuRunLock(int fd)
        : m_fd(fd)
    {
    }
    int m_fd = -1;
};

// The local GPU a run without KL_WORKER would use: CUDA_VISIBLE_DEVICES's first entry, else device 0.
std::string localGpuKey();

} // namespace kl
