#include "agent/llm/sse.h"

#include <gtest/gtest.h>

using kl::llm::SseParser;

TEST(Sse, EventsSplitAcrossChunksAndLineEndings)
{
    SseParser p;
    const std::string stream
        = "event: a\r\ndata: one\r\n\r\n: comment\ndata: two\ndata: lines\n\nevent: b\rdata: {\"x\":1}\r\r";
    std::vector<kl::llm::SseEvent> all;
    // Feed byte by byte: every split point must give the same events.
    for (char c : stream)
        for (auto& e : p.feed(&c, 1))
            all.push_back(e);
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[0].event, "a");
    EXPECT_EQ(all[0].data, "one");
    EXPECT_EQ(all[1].event, "");
    EXPECT_EQ(all[1].data, "two\nlines");
    EXPECT_EQ(all[2].event, "b");
    EXPECT_EQ(all[2].data, "{\"x\":1}");
    EXPECT_FALSE(p.hasPartial());
}

TEST(Sse, PartialEventIsReported)
{
    SseParser p;
    EXPECT_TRUE(p.feed("data: half").empty());
    EXPECT_TRUE(p.hasPartial());
    auto ev = p.feed("\n\n");
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].data, "half");
}

TEST(Sse, DataWithoutSpaceAndEmptyData)
{
    SseParser p;
    auto ev = p.feed("data:x\n\ndata:\n\n");
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].data, "x");
    EXPECT_EQ(ev[1].data, "");
}
