#include "core/live_agent_stream.h"
#include "session_test_util.h"

#include <fstream>
#include <gtest/gtest.h>
#include <random>

namespace fs = std::filesystem;
using kl::LiveStreamReader;
using kl::LiveStreamRecord;
using kl::LiveStreamWriter;
using Kind = kl::LiveStreamRecord::Kind;

namespace {

// What a reader shows: the text of one stream rebuilt from its deltas, with a gap mark where offsets jump.
struct Rebuilt {
    std::string text;
    std::uint64_t base = 0; // the reply's byte offset of text[0]
    int gaps = 0;
    std::vector<Kind> kinds;
};

void rebuild(Rebuilt& r, const std::vector<LiveStreamRecord>& records)
{
    for (const auto& rec : records) {
        r.kinds.push_back(rec.kind);
        if (rec.kind == Kind::Retry) {
            r.text.clear();
            r.base = 0;
        }
        if (rec.kind != Kind::Delta)
            continue;
        const std::uint64_t end = r.base + r.text.size();
        if (rec.offset > end) {
            ++r.gaps;
            r.base = rec.offset - r.text.size();
        } else if (rec.offset >= r.base) {
            r.text.resize(rec.offset - r.base); // a delta read twice is not shown twice
        }
        r.text += rec.text;
    }
}

void appendRaw(const fs::path& file, const std::string& bytes)
{
    std::ofstream out(file, std::ios::app | std::ios::binary);
    out << bytes;
}

} // namespace

TEST(LiveAgentStream, DeltasArriveInOrderAndTheFileIsRemovedAtTheEnd)
{
    kl::test::TempDir tmp;
    LiveStreamReader reader(tmp.path());
    EXPECT_TRUE(reader.poll().empty()); // nothing written yet: no error, nothing read

    LiveStreamWriter writer(tmp.path());
    const std::string id = writer.begin(3, 1, "openai", "gpt-test");
    EXPECT_EQ(writer.currentStream(), id);
    writer.delta("Hel");
    writer.delta("lo, ");
    auto first = reader.poll();
    ASSERT_EQ(first.size(), 3u);
    EXPECT_EQ(first[0].kind, Kind::Begin);
    EXPECT_EQ(first[0].stream, id);
    EXPECT_EQ(first[0].call, 3);
    EXPECT_EQ(first[0].attempt, 1);
    EXPECT_EQ(first[0].model, "gpt-test");
    EXPECT_EQ(first[2].offset, 3u);
    writer.delta("wörld");
    writer.end();
    EXPECT_FALSE(fs::exists(kl::liveAgentStreamPath(tmp.path()))); // cleaned up at the end of the request
    // The reader still had the file open: what was appended before the removal is not lost.
    auto rest = reader.poll();
    ASSERT_EQ(rest.size(), 2u);
    EXPECT_EQ(rest[0].text, "wörld");
    EXPECT_EQ(rest[1].kind, Kind::End);
    EXPECT_EQ(rest[1].text, "done");
    Rebuilt r;
    rebuild(r, first);
    rebuild(r, rest);
    EXPECT_EQ(r.text, "Hello, wörld");
    EXPECT_EQ(r.gaps, 0);
    EXPECT_TRUE(reader.poll().empty());

    // The next request is a new stream with its own id, offsets from zero.
    const std::string next = writer.begin(4, 1);
    EXPECT_NE(next, id);
    writer.delta("again");
    auto again = reader.poll();
    ASSERT_EQ(again.size(), 2u);
    EXPECT_EQ(again[0].stream, next);
    EXPECT_EQ(again[1].offset, 0u);
}

TEST(LiveAgentStream, APartialLineWaitsForItsNewlineAndMalformedLinesAreSkipped)
{
    kl::test::TempDir tmp;
    const fs::path file = kl::liveAgentStreamPath(tmp.path());
    fs::create_directories(file.parent_path());
    LiveStreamReader reader(tmp.path());
    appendRaw(file,
        R"({"kind":"begin","stream":"s1","call":1,"attempt":1})"
        "\n"
        R"({"kind":"delta","str)");
    auto a = reader.poll();
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].kind, Kind::Begin);
    EXPECT_TRUE(reader.poll().empty()); // the half line is not a record yet
    appendRaw(file,
        R"(eam":"s1","offset":0,"text":"ab"})"
        "\nnot json\n"
        R"({"kind":"bogus","stream":"s1"})"
        "\n"
        R"({"kind":"delta","stream":"s1","offset":"x"})"
        "\n"
        R"({"kind":"delta","stream":"s1","offset":2,"text":"cd"})"
        "\n");
    auto b = reader.poll();
    ASSERT_EQ(b.size(), 2u);
    EXPECT_EQ(b[0].text, "ab");
    EXPECT_EQ(b[1].text, "cd");
    EXPECT_EQ(reader.skippedLines(), 3u);
}

TEST(LiveAgentStream, AnOverlongLineIsDroppedWithoutHoldingItAllInMemory)
{
    kl::test::TempDir tmp;
    const fs::path file = kl::liveAgentStreamPath(tmp.path());
    fs::create_directories(file.parent_path());
    LiveStreamReader reader(tmp.path(), 256);
    appendRaw(file, R"({"kind":"delta","stream":"s1","offset":0,"text":")" + std::string(300, 'x'));
    EXPECT_TRUE(reader.poll().empty());
    appendRaw(file, std::string(5000, 'y'));
    EXPECT_TRUE(reader.poll().empty());
    appendRaw(file,
        "\"}\n"
        R"({"kind":"delta","stream":"s1","offset":5300,"text":"ok"})"
        "\n");
    auto r = reader.poll();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].text, "ok");
    EXPECT_EQ(reader.skippedLines(), 1u);
}

TEST(LiveAgentStream, TheFileStaysBoundedAndAReaderFollowsItAcrossRotations)
{
    kl::test::TempDir tmp;
    constexpr std::size_t kMax = 4096;
    LiveStreamWriter writer(tmp.path(), kMax);
    LiveStreamReader often(tmp.path());
    LiveStreamReader late(tmp.path());
    writer.begin(1, 1);
    std::mt19937 rng(7);
    std::string sent;
    Rebuilt seen;
    for (int i = 0; i < 400; ++i) {
        std::string chunk(1 + rng() % 40, 'a' + static_cast<char>(i % 26));
        if (i % 7 == 0)
            chunk += "é\n\"\\"; // multi-byte, newline, quote and backslash survive the line format
        writer.delta(chunk);
        sent += chunk;
        EXPECT_LE(fs::file_size(kl::liveAgentStreamPath(tmp.path())), kMax);
        if (i % 5 == 0)
            rebuild(seen, often.poll());
    }
    rebuild(seen, often.poll());
    EXPECT_GT(writer.rotations(), 3);
    // A reader that keeps up loses nothing across rotations.
    EXPECT_TRUE(seen.text == sent) << seen.text.size() << " bytes seen of " << sent.size();
    EXPECT_EQ(seen.gaps, 0);
    EXPECT_NE(std::find(seen.kinds.begin(), seen.kinds.end(), Kind::Rotate), seen.kinds.end());

    // A reader that comes late sees only the newest file, which starts with where its text begins.
    auto tail = late.poll();
    ASSERT_FALSE(tail.empty());
    EXPECT_EQ(tail.front().kind, Kind::Rotate);
    EXPECT_GT(tail.front().offset, 0u);
    Rebuilt partial;
    rebuild(partial, tail);
    EXPECT_EQ(partial.gaps, 1);
    EXPECT_TRUE(sent.ends_with(partial.text));

    // A huge single chunk (a server that sends everything at once) is split, still within the bound; a reader
    // that polls only afterwards sees the newest file and knows exactly how much it missed.
    const std::string big(3 * kMax, 'z');
    const int rotationsBefore = writer.rotations();
    writer.delta(big);
    EXPECT_GE(writer.rotations(), rotationsBefore + 2);
    EXPECT_LE(fs::file_size(kl::liveAgentStreamPath(tmp.path())), kMax);
    sent += big;
    rebuild(seen, often.poll());
    EXPECT_EQ(seen.gaps, 1);
    EXPECT_EQ(seen.base + seen.text.size(), sent.size());
    EXPECT_TRUE(sent.starts_with(seen.text.substr(0, seen.text.find('z'))));
    EXPECT_LE(fs::file_size(kl::liveAgentStreamPath(tmp.path())), kMax);
}

TEST(LiveAgentStream, ARetryVoidsTheTextAndATruncatedFileIsReadFromTheStart)
{
    kl::test::TempDir tmp;
    LiveStreamWriter writer(tmp.path());
    LiveStreamReader reader(tmp.path());
    writer.begin(1, 1);
    writer.delta("first try");
    writer.retry("HTTP 503");
    writer.delta("second");
    Rebuilt r;
    rebuild(r, reader.poll());
    EXPECT_EQ(r.text, "second");
    EXPECT_EQ(r.gaps, 0);

    // Someone truncates the file in place and writes anew: the reader starts over instead of waiting for
    // the old length.
    const fs::path file = kl::liveAgentStreamPath(tmp.path());
    fs::resize_file(file, 0);
    appendRaw(file,
        R"({"kind":"delta","stream":"x","offset":0,"text":"fresh"})"
        "\n");
    auto after = reader.poll();
    ASSERT_EQ(after.size(), 1u);
    EXPECT_EQ(after[0].text, "fresh");
}

TEST(LiveAgentStream, TheAgentsJournalRecordsNameTheStreamAndDriveItsLife)
{
    kl::test::TempDir tmp;
    LiveStreamWriter writer(tmp.path());
    LiveStreamReader reader(tmp.path());
    nlohmann::json request = { { "type", "llm.request" }, { "call", 2 }, { "reply_attempt", 1 },
        { "provider", "anthropic" }, { "model", "claude-test" } };
    writer.observeAgentRecord(request);
    ASSERT_TRUE(request.contains("live_stream"));
    EXPECT_EQ(request["live_stream"], writer.currentStream());
    writer.delta("partial reply");
    auto records = reader.poll();
    nlohmann::json reply = { { "type", "llm.reply" }, { "call", 2 }, { "text", "partial reply" } };
    writer.observeAgentRecord(reply);
    EXPECT_EQ(reply["live_stream"], request["live_stream"]);
    EXPECT_TRUE(writer.currentStream().empty());
    EXPECT_FALSE(fs::exists(kl::liveAgentStreamPath(tmp.path())));
    for (auto& r : reader.poll()) // the end line, read through the descriptor of the removed file
        records.push_back(r);
    ASSERT_EQ(records.size(), 3u);
    EXPECT_EQ(records[0].provider, "anthropic");
    EXPECT_EQ(records[0].call, 2);
    EXPECT_EQ(records[2].kind, Kind::End);

    // Other records and odd shapes pass untouched.
    nlohmann::json verdict = { { "type", "llm.verdict" } };
    writer.observeAgentRecord(verdict);
    EXPECT_FALSE(verdict.contains("live_stream"));
    nlohmann::json odd = { { "type", "llm.request" }, { "call", "two" } };
    EXPECT_NO_THROW(writer.observeAgentRecord(odd));
    nlohmann::json notObject = nlohmann::json::array();
    EXPECT_NO_THROW(writer.observeAgentRecord(notObject));
}

TEST(LiveAgentStream, AWriterThatCannotWriteNeverThrows)
{
    kl::test::TempDir tmp;
    const fs::path notADir = tmp.path() / "file";
    std::ofstream(notADir) << "x";
    LiveStreamWriter writer(notADir); // <file>/live cannot be created
    EXPECT_NO_THROW({
        writer.begin(1, 1);
        writer.delta("text");
        writer.end();
    });
    EXPECT_FALSE(writer.error().empty());
}

TEST(LiveAgentStream, AFileAKilledRunLeftBehindIsNotShownAsStreaming)
{
    kl::test::TempDir tmp;
    const fs::path dir = tmp.path() / "s";
    {
        auto store = kl::SessionStore::create(dir, kl::test::sampleHeader());
        EXPECT_TRUE(kl::sessionHasWriter(dir)); // kloop run holds the journal's lock while it runs
    }
    EXPECT_FALSE(kl::sessionHasWriter(dir));
    // What a run killed mid-reply leaves: a begun stream that never ends.
    const fs::path file = kl::liveAgentStreamPath(dir);
    fs::create_directories(file.parent_path());
    appendRaw(file,
        R"({"kind":"begin","stream":"old","call":1,"attempt":1})"
        "\n"
        R"({"kind":"delta","stream":"old","offset":0,"text":"never finished"})"
        "\n");
    LiveStreamReader reader(dir);
    reader.skipCurrent(); // the workbench does this when no writer holds the session
    EXPECT_TRUE(reader.poll().empty());

    // A resumed run removes the leftover and streams anew; the reader follows it from its first line.
    auto store = kl::SessionStore::open(dir);
    LiveStreamWriter writer(dir);
    EXPECT_FALSE(fs::exists(file));
    writer.begin(2, 1);
    writer.delta("fresh");
    const auto records = reader.poll();
    ASSERT_EQ(records.size(), 2u);
    EXPECT_EQ(records[0].kind, Kind::Begin);
    EXPECT_EQ(records[1].text, "fresh");
}
