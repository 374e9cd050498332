#include "core/session_inbox.h"
#include "core/session_store.h"
#include "session_test_util.h"

#include <fstream>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

TEST(SessionInbox, RequestsArriveInOrderOnceAndMalformedOnesAreSetAside)
{
    kl::test::TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    kl::SessionStore::create(dir, kl::test::sampleHeader());
    kl::postInboxRequest(dir, { kl::InboxRequest::Kind::Hypothesis, "", false, "pipeline the loads" });
    kl::postInboxRequest(dir, { kl::InboxRequest::Kind::Review, "c0003", true, "looks right" });
    kl::postInboxRequest(dir, { kl::InboxRequest::Kind::Branch, "c0002", false, "" });
    std::ofstream(dir / "inbox" / "zzz-bad.json") << R"({"kind": "review", "candidate": "../../x"})";
    std::ofstream(dir / "inbox" / ".tmp-in-progress.json") << "{";

    const kl::InboxBatch batch = kl::takeInboxRequests(dir);
    ASSERT_EQ(batch.requests.size(), 3u);
    EXPECT_EQ(batch.requests[0].kind, kl::InboxRequest::Kind::Hypothesis);
    EXPECT_EQ(batch.requests[0].text, "pipeline the loads");
    EXPECT_EQ(batch.requests[1].kind, kl::InboxRequest::Kind::Review);
    EXPECT_TRUE(batch.requests[1].approved);
    EXPECT_EQ(batch.requests[1].candidate, "c0003");
    EXPECT_EQ(batch.requests[2].kind, kl::InboxRequest::Kind::Branch);
    ASSERT_EQ(batch.errors.size(), 1u);
    EXPECT_NE(batch.errors[0].find("zzz-bad.json"), std::string::npos) << batch.errors[0];
    EXPECT_TRUE(fs::exists(dir / "inbox" / "rejected" / "zzz-bad.json"));
    EXPECT_TRUE(kl::takeInboxRequests(dir).requests.empty()); // each request is taken once
}

TEST(SessionStoreLock, OneWriterPerSession)
{
    kl::test::TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    auto writer = kl::SessionStore::create(dir, kl::test::sampleHeader());
    // flock locks belong to the open file description, so a second process is the honest test.
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        try {
            kl::SessionStore::open(dir);
            _exit(0);
        } catch (const kl::SessionLockedError&) {
            _exit(7);
        } catch (...) {
            _exit(3);
        }
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 7) << "a second writer was allowed";
    EXPECT_NO_THROW(kl::SessionStore::load(dir)); // readers are never blocked
    writer.reset();
    EXPECT_NO_THROW(kl::SessionStore::open(dir));
}
