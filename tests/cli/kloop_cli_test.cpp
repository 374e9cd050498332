// kloop's command line as a user meets it, through the real binary: options every command rejects, races between
// two kloop processes on one session, and the messages that tell a user what to do next.
#include "core/errors.h"
#include "core/events.h"
#include "core/session_store.h"
#include "kloop_process.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace kl;
using namespace kl::clitest;

namespace {

struct KloopCli : ::testing::Test {
    fs::path scratch;

    void SetUp() override
    {
        scratch = fs::temp_directory_path()
            / ("kl_kloop_cli_" + std::to_string(::getpid()) + "_"
                + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(scratch);
        fs::create_directories(scratch / "home");
    }
    void TearDown() override
    {
        if (!HasFailure() && !std::getenv("KL_TEST_KEEP"))
            fs::remove_all(scratch);
    }
    std::map<std::string, std::string> environment() const
    {
        return { { "HOME", (scratch / "home").string() }, { "XDG_CACHE_HOME", (scratch / "cache").string() },
            { "XDG_CONFIG_HOME", (scratch / "config").string() }, { "KL_PROBLEMS_DIR", "" },
            { "KL_WORKER", KL_FAKE_WORKER_PATH }, { "OPENAI_API_KEY", "sk-test" } };
    }
    ProcessResult kloop(const std::vector<std::string>& args) const { return runKloop(args, environment(), scratch); }
};

} // namespace

// QA row 244: two `kloop session new` on one directory both succeeded and left a journal no command could load.
TEST_F(KloopCli, TwoConcurrentSessionNewOnOneDirectoryExactlyOneSucceedsAndTheJournalLoads)
{
    for (int trial = 0; trial < 12; ++trial) {
        const fs::path dir = scratch / ("s" + std::to_string(trial));
        fs::create_directories(scratch / "a");
        fs::create_directories(scratch / "b");
        KloopProcess first({ "session", "new", dir.string(), "--problem", "rmsnorm" }, environment(), scratch / "a");
        KloopProcess second({ "session", "new", dir.string(), "--problem", "rmsnorm" }, environment(), scratch / "b");
        const ProcessResult r1 = first.wait();
        const ProcessResult r2 = second.wait();
        ASSERT_NE(r1.exitCode, -1) << r1.err;
        ASSERT_NE(r2.exitCode, -1) << r2.err;
        EXPECT_EQ((r1.exitCode == 0) + (r2.exitCode == 0), 1)
            << "trial " << trial << ":\n" << r1.out << r1.err << "\n---\n" << r2.out << r2.err;
        const ProcessResult& loser = r1.exitCode == 0 ? r2 : r1;
        EXPECT_EQ(loser.exitCode, 1) << loser.err;
        EXPECT_TRUE(loser.err.find("another process") != std::string::npos
            || loser.err.find("already exists") != std::string::npos)
            << loser.err;
        std::vector<Event> events;
        ASSERT_NO_THROW(SessionStore::load(dir, nullptr, &events)) << "trial " << trial;
        int created = 0;
        for (const auto& e : events)
            created += e.kind == EventKind::SessionCreated;
        EXPECT_EQ(created, 1);
        EXPECT_EQ(kloop({ "session", "show", dir.string() }).exitCode, 0);
    }
}

// The same race without process start-up in between (which on a loaded machine often serialises the two): two
// creators released at once on one directory.
TEST_F(KloopCli, TwoSessionStoreCreatorsReleasedAtOnceExactlyOneSucceeds)
{
    for (int trial = 0; trial < 40; ++trial) {
        const fs::path dir = scratch / ("t" + std::to_string(trial));
        Session header;
        header.id = "race";
        header.problemName = "rmsnorm";
        std::atomic<int> ready { 0 };
        std::atomic<int> created { 0 };
        std::vector<std::string> errors(2);
        std::vector<std::thread> creators;
        for (int i = 0; i < 2; ++i)
            creators.emplace_back([&, i] {
                ready.fetch_add(1);
                while (ready.load() < 2) { }
                try {
                    // Done at once, as `kloop session new` is: the lock is released while the other may still be
                    // on its way to it.
                    SessionStore::create(dir, header).reset();
                    created.fetch_add(1);
                } catch (const InputError& e) {
                    errors[static_cast<std::size_t>(i)] = e.what();
                }
            });
        for (auto& t : creators)
            t.join();
        EXPECT_EQ(created.load(), 1) << "trial " << trial << ": " << errors[0] << " | " << errors[1];
        std::vector<Event> events;
        ASSERT_NO_THROW(SessionStore::load(dir, nullptr, &events)) << "trial " << trial;
        EXPECT_EQ(events.size(), 1u);
    }
}

