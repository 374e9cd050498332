#pragma once
// Scratch directories for tests: TempDir (made, and removed with the object) and freshDir (a path not there yet).
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>

namespace kl::test {

// A path that does not exist yet (removed if it did), for a directory the code under test creates; under tmpfs
// when the machine has one, since sessions fsync every event. The caller removes it.
inline std::filesystem::path freshDir(const std::string& tag)
{
    static std::mt19937_64 rng(std::random_device {}());
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
        ? std::filesystem::path("/dev/shm")
        : std::filesystem::temp_directory_path();
    const auto dir = base / ("kl-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000));
    std::filesystem::remove_all(dir);
    return dir;
}

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
public:
    TempDir()
    {
        std::random_device rd;
        m_path = std::filesystem::temp_directory_path() / ("kl-test-" + std::to_string(rd()) + std::to_string(rd()));
        std::filesystem::create_directories(m_path);
    }
    ~TempDir()
    {
        std::error_code ec;
        std::filesystem::remove_all(m_path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return m_path; }

private:
    std::filesystem::path m_path;
};

} // namespace kl::test
