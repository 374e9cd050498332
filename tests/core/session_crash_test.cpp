// kill -9 during a burst of writes, many times: every event the writer saw complete must load.
#include "core/session_store.h"
#include "session_test_util.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <gtest/gtest.h>
#include <poll.h>
#include <random>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

[[noreturn]] void writerMain(const fs::path& dir, int reportFd)
{
    try {
        auto store = kl::SessionStore::open(dir);
        std::string parent = store->session().tree.empty() ? "" : store->session().tree.order().back();
        for (int i = 0;; ++i) {
            const kl::Event p = store->proposeCandidate(kl::test::sampleCandidate(parent, i % 2 ? 128 : 256));
            std::uint64_t seq = p.seq;
            if (::write(reportFd, &seq, sizeof seq) != sizeof seq)
                _exit(4);
            const kl::Event e = store->recordEvaluation(kl::test::sampleEvaluation(p.candidateId, 1.0 + i * 0.01));
            seq = e.seq;
            if (::write(reportFd, &seq, sizeof seq) != sizeof seq)
                _exit(4);
            parent = p.candidateId;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "writer failed: %s\n", e.what());
        _exit(3);
    } catch (...) {
        _exit(3);
    }
}

} // namespace

TEST(SessionCrash, KillNineDuringWritesLosesNothingCompleted)
{
    const char* env = std::getenv("KL_CRASH_ITERATIONS");
    const int iterations = env ? std::atoi(env) : 100;
    kl::test::TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    kl::SessionStore::create(dir, kl::test::sampleHeader());
    std::mt19937 rng(std::random_device {}());
    std::uint64_t everCompleted = 0;
    for (int it = 0; it < iterations; ++it) {
        int fds[2];
        ASSERT_EQ(::pipe(fds), 0);
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            ::close(fds[0]);
            writerMain(dir, fds[1]);
        }
        ::close(fds[1]);
        std::uint64_t firstSeq = 0;
        if (it % 2 == 1) {
            // Every other round waits for the writer's first completed event, so the loop makes progress
            // on a loaded machine; the other rounds kill at any instant, during start-up included.
            pollfd pfd { fds[0], POLLIN, 0 };
            if (::poll(&pfd, 1, 5000) == 1 && ::read(fds[0], &firstSeq, sizeof firstSeq) != sizeof firstSeq)
                firstSeq = 0;
        }
        ::usleep(static_cast<useconds_t>(rng() % 25000));
        ::kill(pid, SIGKILL);
        int status = 0;
        ::waitpid(pid, &status, 0);
        ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited on its own with " << WEXITSTATUS(status);
        std::uint64_t seq = 0, last = firstSeq;
        while (::read(fds[0], &seq, sizeof seq) == sizeof seq)
            last = seq;
        ::close(fds[0]);
        everCompleted = std::max(everCompleted, last);

        kl::LoadReport report;
        kl::Session s;
        ASSERT_NO_THROW(s = kl::SessionStore::load(dir, &report)) << "iteration " << it;
        EXPECT_GE(report.eventsLoaded, everCompleted) << "iteration " << it << ": a completed event was lost";
        EXPECT_LE(report.warnings.size(), 1u);
        for (const auto& id : s.tree.order())
            EXPECT_TRUE(fs::exists(dir / "candidates" / id / "source.cu")) << id;
    }
    EXPECT_GT(everCompleted, 1u) << "the writer never completed an event; the test proved nothing";
}
