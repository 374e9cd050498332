#include "core/errors.h"
#include "core/journal_reader.h"
#include "core/json_io.h"
#include "core/session_store.h"
#include "session_test_util.h"
#include "tests/support/text_file.h"

#include <fstream>
#include <gtest/gtest.h>

namespace fs = std::filesystem;
using kl::test::TempDir;

namespace {
void appendRaw(const fs::path& p, const std::string& text)
{
    std::ofstream out(p, std::ios::app | std::ios::binary);
    out << text;
}
} // namespace

TEST(SessionStore, RoundTripsEverything)
{
    TempDir tmp;
    const fs::path dir = tmp.path() / "sess";
    {
        auto store = kl::SessionStore::create(dir, kl::test::sampleHeader());
        int published = 0;
        store->bus().subscribe([&](const kl::Event&) { ++published; });
        store->addHypothesis({ "", "vectorize the loads", kl::Author::Human, 0 });
        const auto a = store->proposeCandidate(kl::test::sampleCandidate("", 256));
        const auto b = store->proposeCandidate(kl::test::sampleCandidate(a.candidateId, 128));
        store->setStatus(b.candidateId, kl::CandidateStatus::Verifying);
        store->recordEvaluation(kl::test::sampleEvaluation(b.candidateId, 1.4));
        store->moveHead(b.candidateId, "best so far");
        EXPECT_EQ(published, 6);
    }
    EXPECT_TRUE(fs::exists(dir / "candidates" / "c0002" / "source.cu"));
    EXPECT_TRUE(fs::exists(dir / "candidates" / "c0002" / "evaluation.json"));
    kl::LoadReport report;
    const kl::Session s = kl::SessionStore::load(dir, &report);
    EXPECT_TRUE(report.warnings.empty());
    EXPECT_EQ(report.eventsLoaded, 7u);
    EXPECT_EQ(s.id, "s1");
    EXPECT_EQ(s.tree.size(), 2u);
    EXPECT_EQ(s.tree.at("c0002").parentId, "c0001");
    EXPECT_EQ(s.tree.at("c0002").status, kl::CandidateStatus::Accepted);
    EXPECT_EQ(s.tree.at("c0002").params.at("BLOCK"), 128);
    EXPECT_EQ(s.tree.head(), "c0002");
    EXPECT_DOUBLE_EQ(s.evaluations.at("c0002").objective, 1.4);
    EXPECT_EQ(s.hypotheses.size(), 1u);
    EXPECT_EQ(s.tree.at("c0001").sourceHash, kl::sha256Hex(s.tree.at("c0001").source));
}

TEST(SessionStore, RefusesToCreateOverAnExistingSession)
{
    TempDir tmp;
    kl::SessionStore::create(tmp.path() / "s", kl::test::sampleHeader());
    EXPECT_THROW(kl::SessionStore::create(tmp.path() / "s", kl::test::sampleHeader()), kl::InputError);
}

TEST(SessionStore, TornLastLineIsReportedAndCutOnReopen)
{
    TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    {
        auto store = kl::SessionStore::create(dir, kl::test::sampleHeader());
        store->proposeCandidate(kl::test::sampleCandidate("", 256));
    }
    appendRaw(dir / "journal.jsonl", R"({"seq":3,"t":1,"kind":"candidate-pro)");
    kl::LoadReport report;
    const kl::Session s = kl::SessionStore::load(dir, &report);
    ASSERT_EQ(report.warnings.size(), 1u);
    EXPECT_NE(report.warnings[0].find("line 3"), std::string::npos) << report.warnings[0];
    EXPECT_EQ(s.tree.size(), 1u);
    {
        auto store = kl::SessionStore::open(dir);
        store->proposeCandidate(kl::test::sampleCandidate("c0001", 128));
    }
    kl::LoadReport again;
    const kl::Session s2 = kl::SessionStore::load(dir, &again);
    EXPECT_TRUE(again.warnings.empty());
    EXPECT_EQ(s2.tree.size(), 2u);
}

// The reader load() hands back follows a writer: it reads only complete lines, continues where it stopped, and
// refuses a line out of sequence naming the file and line.
TEST(JournalReader, FollowsAWriterLineByLineFromWhereTheLoadStopped)
{
    TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    auto writer = kl::SessionStore::create(dir, kl::test::sampleHeader());
    writer->proposeCandidate(kl::test::sampleCandidate("", 256));
    kl::JournalReader reader(dir / "journal.jsonl");
    std::vector<kl::Event> loaded;
    const kl::Session s = kl::SessionStore::load(dir, nullptr, &loaded, &reader);
    ASSERT_EQ(loaded.size(), 2u);
    EXPECT_EQ(s.tree.size(), 1u);
    std::vector<kl::Event> seen;
    const auto follow = [&] { return reader.readAppended([&](kl::Event e) { seen.push_back(std::move(e)); }); };
    EXPECT_EQ(follow(), 0u);

    writer->note("one");
    writer->note("two");
    EXPECT_EQ(follow(), 2u);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0].seq, 3u);
    EXPECT_EQ(seen[1].seq, 4u);

    const std::string next = kl::eventToJson(seen[1]).dump();
    appendRaw(dir / "journal.jsonl", next.substr(0, next.size() / 2)); // a writer mid-line
    EXPECT_EQ(follow(), 0u);
    EXPECT_EQ(reader.unterminatedBytes(), next.size() / 2);
    appendRaw(dir / "journal.jsonl", next.substr(next.size() / 2) + "\n"); // seq 4 again: out of sequence
    try {
        follow();
        FAIL() << "a repeated sequence number was accepted";
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("journal.jsonl line 5: event sequence 4 where 5"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(seen.size(), 2u);
}

TEST(SessionStore, CorruptionInTheMiddleIsAnErrorNamingFileAndLine)
{
    TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    {
        auto store = kl::SessionStore::create(dir, kl::test::sampleHeader());
        store->proposeCandidate(kl::test::sampleCandidate("", 256));
    }
    std::string j = kl::test::readTextFile(dir / "journal.jsonl");
    j.insert(j.find('\n') + 1, "garbage\n");
    kl::writeFileAtomic(dir / "journal.jsonl", j);
    try {
        kl::SessionStore::load(dir);
        FAIL();
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("journal.jsonl line 2"), std::string::npos) << e.what();
    }
}

TEST(SessionStore, FutureVersionIsRefusedClearly)
{
    TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    kl::SessionStore::create(dir, kl::test::sampleHeader());
    auto h = kl::Json::parse(kl::test::readTextFile(dir / "session.json"));
    h["schema_version"] = 99;
    kl::writeFileAtomic(dir / "session.json", h.dump());
    try {
        kl::SessionStore::load(dir);
        FAIL();
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("session.json"), std::string::npos) << e.what();
    }
}

TEST(SessionStore, HostileIdsNeverBecomePaths)
{
    TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    {
        auto store = kl::SessionStore::create(dir, kl::test::sampleHeader());
        kl::Candidate c = kl::test::sampleCandidate("", 256);
        c.id = "../../escape";
        EXPECT_THROW(store->proposeCandidate(c), kl::InputError);
    }
    // The same through a hand-edited journal.
    kl::Candidate c = kl::test::sampleCandidate("", 256);
    c.id = "c0001";
    kl::Json cj = kl::toJson(c);
    cj["id"] = "../../x";
    const kl::Json ev
        = { { "seq", 2 }, { "t", 5 }, { "kind", "candidate-proposed" }, { "candidate", "../../x" }, { "data", cj } };
    appendRaw(dir / "journal.jsonl", ev.dump() + "\n");
    EXPECT_THROW(kl::SessionStore::load(dir), kl::InputError);
    EXPECT_FALSE(fs::exists(tmp.path() / "x"));
    EXPECT_FALSE(kl::isSafeId("a/b"));
    EXPECT_FALSE(kl::isSafeId(".."));
    EXPECT_TRUE(kl::isSafeId("c0001"));
}

TEST(SessionStore, SecretsAreNeverWritten)
{
    TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    kl::Session h = kl::test::sampleHeader();
    h.settings.extra["api_key"] = "sk-live-SECRET1";
    h.settings.extra["model"] = "gpt-x";
    {
        auto store = kl::SessionStore::create(dir, h);
        store->agentMessage({ { "provider", "openai" },
            { "headers", { { "Authorization", "Bearer sk-live-SECRET2" } } }, { "prompt", "hello" } });
    }
    for (const auto& f : fs::recursive_directory_iterator(dir)) {
        if (!f.is_regular_file())
            continue;
        const std::string text = kl::test::readTextFile(f.path());
        EXPECT_EQ(text.find("SECRET"), std::string::npos) << f.path();
    }
    const kl::Session s = kl::SessionStore::load(dir);
    EXPECT_EQ(s.settings.extra.at("model"), "gpt-x");
}

TEST(SessionStore, InvalidEventsNeverReachTheJournal)
{
    TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    auto store = kl::SessionStore::create(dir, kl::test::sampleHeader());
    EXPECT_THROW(store->setStatus("c0042", kl::CandidateStatus::Accepted), kl::InputError);
    EXPECT_THROW(store->proposeCandidate(kl::test::sampleCandidate("nope", 256)), kl::InputError);
    kl::LoadReport r;
    kl::SessionStore::load(dir, &r);
    EXPECT_EQ(r.eventsLoaded, 1u);
}

TEST(SessionStore, ReviewMovesPendingCandidates)
{
    TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    auto store = kl::SessionStore::create(dir, kl::test::sampleHeader());
    const auto a = store->proposeCandidate(kl::test::sampleCandidate("", 256));
    store->setStatus(a.candidateId, kl::CandidateStatus::PendingReview, "LLM diff");
    store->recordReview({ a.candidateId, false, "touches the reference", 0 });
    EXPECT_EQ(store->session().tree.at(a.candidateId).status, kl::CandidateStatus::Rejected);
    const kl::Session s = kl::SessionStore::load(dir);
    EXPECT_EQ(s.reviews.size(), 1u);
    EXPECT_EQ(s.tree.at(a.candidateId).status, kl::CandidateStatus::Rejected);
}
