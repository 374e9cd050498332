#include "core/gpu_run_lock.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

class GpuRunLockTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        m_dir = fs::temp_directory_path() / ("kl-gpu-lock-" + std::to_string(::getpid()));
        fs::create_directories(m_dir);
        ::setenv("KL_GPU_LOCK_DIR", m_dir.c_str(), 1);
    }
    void TearDown() override
    {
        ::unsetenv("KL_GPU_LOCK_DIR");
        fs::remove_all(m_dir);
    }
    fs::path m_dir;
};

TEST_F(GpuRunLockTest, ASecondRunOnTheSameGpuIsRefusedAndToldWhoHasIt)
{
    // The holder is another process (flock is per open file, so a second acquire in this process would not do).
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::close(ready[0]);
        auto lock = kl::GpuRunLock::tryAcquire("0", "/sessions/first", nullptr);
        const char ok = lock ? 'y' : 'n';
        if (::write(ready[1], &ok, 1) != 1)
            std::_Exit(2);
        ::pause(); // held until killed: kill -9 must release it
        std::_Exit(0);
    }
    ::close(ready[1]);
    char ok = 0;
    ASSERT_EQ(::read(ready[0], &ok, 1), 1);
    ::close(ready[0]);
    ASSERT_EQ(ok, 'y');

    kl::GpuRunHolder holder;
    EXPECT_FALSE(kl::GpuRunLock::tryAcquire("0", "/sessions/second", &holder));
    EXPECT_EQ(holder.pid, child);
    EXPECT_EQ(holder.session, "/sessions/first");
    const auto seen = kl::GpuRunLock::holder("0");
    ASSERT_TRUE(seen);
    EXPECT_EQ(seen->session, "/sessions/first");
    // Another GPU is free.
    EXPECT_TRUE(kl::GpuRunLock::tryAcquire("1", "/sessions/other-gpu", nullptr));

    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_FALSE(kl::GpuRunLock::holder("0"));
    auto mine = kl::GpuRunLock::tryAcquire("0", "/sessions/second", nullptr);
    ASSERT_TRUE(mine) << "kill -9 of the holder left the GPU locked";
    const auto now = kl::GpuRunLock::holder("0");
    ASSERT_TRUE(now);
    EXPECT_EQ(now->pid, ::getpid());
    EXPECT_EQ(now->session, "/sessions/second");
}

TEST_F(GpuRunLockTest, ReleasedWhenTheHolderGoesAway)
{
    {
        auto lock = kl::GpuRunLock::tryAcquire("3", "/sessions/a", nullptr);
        ASSERT_TRUE(lock);
    }
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0)
        std::_Exit(kl::GpuRunLock::holder("3") ? 1 : 0);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the lock outlived its holder";
}

TEST(GpuRunLockKey, FollowsCudaVisibleDevices)
{
    ::setenv("CUDA_VISIBLE_DEVICES", "GPU-1234,2", 1);
    EXPECT_EQ(kl::localGpuKey(), "GPU-1234");
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    EXPECT_EQ(kl::localGpuKey(), "0");
    EXPECT_EQ(kl::GpuRunLock::lockPath("a/b").filename(), "kernelloop-gpu-a_b.lock");
}

} // namespace
