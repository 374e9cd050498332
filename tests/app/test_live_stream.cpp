// The agent's reply streaming into the hypothesis console while another process (kloop run) writes the
// session: the test plays that process with the same writer kloop run uses (core/live_agent_stream.h) and the
// session store for the journal records.
#include "app/hypothesis_console.h"
#include "app/main_window.h"
#include "app/session_controller.h"
#include "app/session_worker.h"
#include "core/live_agent_stream.h"
#include "session_fixture.h"
#include "wait_until.h"

#include <QElapsedTimer>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <gtest/gtest.h>

using namespace kl::app;

namespace {

using kl::test::waitUntil;

// What kloop run's LLM hooks do: each agent record goes through the stream writer (which names the stream in
// it), then to the journal.
void record(kl::SessionStore& store, kl::LiveStreamWriter& live, nlohmann::json j)
{
    live.observeAgentRecord(j);
    store.agentMessage(j);
}

} // namespace

TEST(LiveAgentStreamConsole, TheConsoleShowsTheReplyAsItStreamsAndTheJournalCompletesIt)
{
    QTemporaryDir tmp;
    const auto dir = std::filesystem::path(tmp.path().toStdString()) / "session";
    kl::test::writeSession(dir);
    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::sessionReady);
    w.openSession(QString::fromStdString(dir.string()), OpenMode::Follow);
    ASSERT_TRUE(ready.wait(10000));
    HypothesisConsole* console = w.hypothesisConsole();
    ASSERT_TRUE(waitUntil([&]() { return !console->isStreaming(); })); // the fixture's recorded reply is shown

    auto store = kl::SessionStore::open(dir); // the run's writer
    kl::LiveStreamWriter live(dir);
    record(*store, live,
        { { "type", "llm.request" }, { "call", 7 }, { "reply_attempt", 1 }, { "provider", "openai" },
            { "model", "gpt-live" } });
    const QString stream = QString::fromStdString(live.currentStream());
    ASSERT_FALSE(stream.isEmpty());

    // Each chunk shows up while the reply is still streaming, in order, before any journal record of it.
    const QStringList chunks = { QStringLiteral("The row fits in registers, "), QStringLiteral("so one warp per row "),
        QStringLiteral("removes the shared-memory round trip; "), QStringLiteral("vectorise the loads to 16 B.") };
    QString sent;
    for (const QString& chunk : chunks) {
        live.delta(chunk.toStdString());
        sent += chunk;
        ASSERT_TRUE(waitUntil([&]() { return console->transcript().contains(sent); }))
            << "waiting for: " << sent.toStdString() << "\ntranscript:\n"
            << console->transcript().toStdString();
        EXPECT_EQ(console->liveStream(), stream);
    }
    EXPECT_TRUE(console->transcript().contains(QStringLiteral("gpt-live replies (call 7, attempt 1), streaming")));
    EXPECT_EQ(kl::SessionStore::load(dir).tree.size(), w.controller()->session()->tree.size());

    // The run ends the request: the live file goes away and the journal's reply (one more chunk that was never
    // read live) completes the text without showing it twice.
    live.delta(" Done.");
    const std::string full = QString(sent + QStringLiteral(" Done.")).toStdString();
    record(*store, live,
        { { "type", "llm.reply" }, { "call", 7 }, { "reply_attempt", 1 }, { "model", "gpt-live" }, { "text", full },
            { "usage", { { "input_tokens", 900 }, { "output_tokens", 40 } } } });
    EXPECT_FALSE(std::filesystem::exists(kl::liveAgentStreamPath(dir)));
    ASSERT_TRUE(waitUntil([&]() { return console->transcript().contains(QStringLiteral("← reply from gpt-live")); }));
    ASSERT_TRUE(waitUntil([&]() { return !console->isStreaming(); }));
    const QString transcript = console->transcript();
    EXPECT_EQ(transcript.count(QString::fromStdString(full)), 1) << transcript.toStdString();
    EXPECT_EQ(transcript.count(chunks.front()), 1);
    EXPECT_TRUE(console->liveStream().isEmpty());

    // A retry voids the text so far: the console says so and the new attempt's text follows.
    record(*store, live, { { "type", "llm.request" }, { "call", 8 }, { "reply_attempt", 1 }, { "model", "gpt-live" } });
    live.delta("first attempt, cut off");
    ASSERT_TRUE(waitUntil([&]() { return console->transcript().contains(QStringLiteral("first attempt, cut off")); }));
    live.retry("HTTP 503 from the server");
    live.delta("second attempt");
    ASSERT_TRUE(waitUntil([&]() { return console->transcript().contains(QStringLiteral("second attempt")); }));
    const QString afterRetry = console->transcript();
    const auto retryAt = afterRetry.indexOf(QStringLiteral("retrying (HTTP 503 from the server)"));
    ASSERT_GE(retryAt, 0) << afterRetry.toStdString();
    EXPECT_LT(afterRetry.indexOf(QStringLiteral("first attempt")), retryAt);
    EXPECT_GT(afterRetry.indexOf(QStringLiteral("second attempt")), retryAt);
}

TEST(LiveAgentStreamConsole, ReadingLateShowsTheGapAndTheRecordedReplyWhole)
{
    QTemporaryDir tmp;
    const auto dir = std::filesystem::path(tmp.path().toStdString()) / "session";
    kl::test::writeSession(dir);
    auto store = kl::SessionStore::open(dir);
    // A tiny bound: the file is replaced several times before the workbench opens the session.
    kl::LiveStreamWriter live(dir, 1024);
    record(*store, live, { { "type", "llm.request" }, { "call", 1 }, { "reply_attempt", 1 }, { "model", "m" } });
    std::string full;
    for (int i = 0; i < 60; ++i) {
        const std::string chunk = "chunk-" + std::to_string(i) + " ";
        live.delta(chunk);
        full += chunk;
    }
    EXPECT_GT(live.rotations(), 1);

    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::sessionReady);
    w.openSession(QString::fromStdString(dir.string()), OpenMode::Follow);
    ASSERT_TRUE(ready.wait(10000));
    HypothesisConsole* console = w.hypothesisConsole();
    ASSERT_TRUE(waitUntil([&]() { return console->transcript().contains(QStringLiteral("chunk-59")); }));
    const QString shown = console->transcript();
    EXPECT_TRUE(shown.contains(QStringLiteral("joined while it was under way")));
    EXPECT_TRUE(shown.contains(QStringLiteral("[…]")));
    EXPECT_FALSE(shown.contains(QStringLiteral("chunk-0 "))); // in a file replaced before the session was opened

    // The journal's reply has the whole text: shown whole, since the live view had a gap.
    record(*store, live, { { "type", "llm.reply" }, { "call", 1 }, { "model", "m" }, { "text", full } });
    ASSERT_TRUE(waitUntil([&]() { return console->transcript().contains(QString::fromStdString(full)); }));
    ASSERT_TRUE(waitUntil([&]() { return !console->isStreaming(); }));
    EXPECT_EQ(console->transcript().count(QString::fromStdString(full)), 1);
}

TEST(LiveAgentStreamConsole, AReplyAKilledRunLeftUnfinishedIsNotShownAsStreaming)
{
    QTemporaryDir tmp;
    const auto dir = std::filesystem::path(tmp.path().toStdString()) / "session";
    kl::test::writeSession(dir);
    {
        // The run is killed mid-reply: the journal has the request, and its live file stays as it was (a killed
        // process runs no destructor; here the file is put back after the writer removed it).
        auto store = kl::SessionStore::open(dir);
        const auto file = kl::liveAgentStreamPath(dir);
        const auto kept = dir / "kept-live-file";
        {
            kl::LiveStreamWriter killed(dir);
            record(
                *store, killed, { { "type", "llm.request" }, { "call", 1 }, { "reply_attempt", 1 }, { "model", "m" } });
            killed.delta("half a reply that will never end");
            std::filesystem::copy_file(file, kept);
        }
        std::filesystem::create_directories(file.parent_path());
        std::filesystem::rename(kept, file);
    }
    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::sessionReady);
    w.openSession(QString::fromStdString(dir.string()), OpenMode::Follow);
    ASSERT_TRUE(ready.wait(10000));
    QTest::qWait(5 * SessionWorker::kLivePollMs);
    EXPECT_FALSE(w.hypothesisConsole()->transcript().contains(QStringLiteral("half a reply")));
    EXPECT_TRUE(w.hypothesisConsole()->liveStream().isEmpty());

    // kloop run --resume: its stream is shown live.
    auto store = kl::SessionStore::open(dir);
    kl::LiveStreamWriter live(dir);
    record(*store, live, { { "type", "llm.request" }, { "call", 1 }, { "reply_attempt", 1 }, { "model", "m" } });
    live.delta("the resumed run's reply");
    EXPECT_TRUE(waitUntil(
        [&]() { return w.hypothesisConsole()->transcript().contains(QStringLiteral("the resumed run's reply")); }));
}
