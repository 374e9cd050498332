#include "profiler/trace.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <random>

using namespace kl::prof;

namespace {

Event ev(uint32_t row, int64_t s, int64_t e, StrId name, EventKind k = EventKind::CpuOp)
{
    Event x;
    x.row = row;
    x.start = s;
    x.end = e;
    x.name = name;
    x.kind = k;
    return x;
}

} // namespace

TEST(StringTable, InternsOnceAndKeepsViewsStableWhileGrowing)
{
    StringTable s;
    EXPECT_EQ(s.intern(""), 0u);
    StrId a = s.intern("kernel_a");
    std::string_view va = s.view(a);
    for (int i = 0; i < 100000; ++i)
        s.intern("name_" + std::to_string(i));
    EXPECT_EQ(s.intern("kernel_a"), a);
    EXPECT_EQ(va, "kernel_a"); // still valid after many chunks were added
    EXPECT_EQ(s.view(s.intern("name_99999")), "name_99999");
    EXPECT_EQ(s.size(), 100002u);
    EXPECT_FALSE(s.find("missing").has_value());
}

TEST(Trace, EventStaysPacked)
{
    EXPECT_EQ(sizeof(Event), 32u);
}

TEST(Trace, NestedSlicesGetOneLanePerDepthAndTimeIsShifted)
{
    Trace t;
    uint32_t r = t.cpuRow(10, 11);
    StrId n = t.strings().intern("x");
    uint32_t parent = t.addEvent(ev(r, 1000, 2000, n));
    uint32_t child1 = t.addEvent(ev(r, 1100, 1200, n));
    uint32_t child2 = t.addEvent(ev(r, 1300, 1900, n));
    uint32_t grandchild = t.addEvent(ev(r, 1400, 1500, n));
    uint32_t sameSpan = t.addEvent(ev(r, 1000, 2000, n)); // identical span nests below
    t.finalize();
    EXPECT_EQ(t.timeOffsetNs(), 1000);
    EXPECT_EQ(t.event(parent).start, 0);
    EXPECT_EQ(t.event(parent).lane, 0);
    EXPECT_EQ(t.event(sameSpan).lane, 1);
    EXPECT_EQ(t.event(child1).lane, 2);
    EXPECT_EQ(t.event(child2).lane, 2);
    EXPECT_EQ(t.event(grandchild).lane, 3);
    EXPECT_EQ(t.rows()[r].lanes.size(), 4u);
}

TEST(Trace, WindowQueryMatchesBruteForceOnRandomOverlappingEvents)
{
    std::mt19937_64 rng(12345);
    Trace t;
    uint32_t r = t.gpuRow(0, 7);
    StrId n = t.strings().intern("k");
    std::uniform_int_distribution<int64_t> start(0, 1'000'000), dur(0, 5000);
    for (int i = 0; i < 20000; ++i) {
        int64_t s = start(rng);
        t.addEvent(ev(r, s, s + dur(rng), n));
    }
    t.finalize();
    // Lanes never overlap and are sorted.
    for (const auto& lane : t.rows()[r].lanes)
        for (size_t i = 1; i < lane.size(); ++i)
            ASSERT_LE(t.event(lane[i - 1]).end, t.event(lane[i]).start);
    std::uniform_int_distribution<int64_t> q(0, 1'010'000), w(0, 50'000);
    for (int k = 0; k < 200; ++k) {
        int64_t t0 = q(rng), t1 = t0 + w(rng);
        auto got = t.eventsInWindow(r, t0, t1);
        std::sort(got.begin(), got.end());
        std::vector<uint32_t> want;
        for (uint32_t i = 0; i < t.eventCount(); ++i)
            if (t.event(i).end >= t0 && t.event(i).start <= t1)
                want.push_back(i);
        ASSERT_EQ(got, want) << "window " << t0 << ".." << t1;
    }
}

TEST(Trace, DrawItemsMergeSubPixelEventsAndCoverEveryEvent)
{
    Trace t;
    uint32_t r = t.gpuRow(0, 1);
    StrId n = t.strings().intern("k");
    // 1000 tiny kernels 10 ns long every 100 ns, then one long one.
    for (int i = 0; i < 1000; ++i)
        t.addEvent(ev(r, i * 100, i * 100 + 10, n, EventKind::Kernel));
    uint32_t big = t.addEvent(ev(r, 200'000, 300'000, n, EventKind::Kernel));
    t.finalize();
    // At 1 us per pixel the tiny kernels merge into one block; the long one stays itself.
    auto items = t.drawItems(r, 0, 0, 400'000, 1000);
    ASSERT_EQ(items.size(), 2u);
    EXPECT_EQ(items[0].count, 1000u);
    EXPECT_EQ(items[0].start, 0);
    EXPECT_EQ(items[0].end, 999 * 100 + 10);
    EXPECT_EQ(items[1].event, big);
    EXPECT_EQ(items[1].count, 1u);
    // Zoomed in to 1 ns per pixel nothing merges.
    auto fine = t.drawItems(r, 0, 0, 1000, 1);
    EXPECT_EQ(fine.size(), 11u);
    uint32_t total = 0;
    for (const auto& it : t.drawItems(r, 0, 0, 400'000, 250))
        total += it.count;
    EXPECT_EQ(total, 1001u);
}

TEST(Trace, LinksByCorrelationPreferRuntimeOverDriver)
{
    Trace t;
    uint32_t cpu = t.cpuRow(1, 1);
    uint32_t gpu = t.gpuRow(0, 7);
    Event rt = ev(cpu, 100, 200, t.strings().intern("cudaLaunchKernel"), EventKind::RuntimeApi);
    Event drv = ev(cpu, 120, 190, t.strings().intern("cuLaunchKernel"), EventKind::DriverApi);
    uint32_t d = t.addEvent(drv, 42);
    uint32_t a = t.addEvent(rt, 42);
    KernelInfo k;
    k.correlation = 42;
    uint32_t kern = t.addKernel(ev(gpu, 300, 400, t.strings().intern("k")), k);
    KernelInfo orphanInfo;
    orphanInfo.correlation = 99;
    uint32_t orphan = t.addKernel(ev(gpu, 500, 600, t.strings().intern("k")), orphanInfo);
    t.finalize();
    EXPECT_EQ(t.launchOf(kern), a);
    EXPECT_NE(t.launchOf(kern), d);
    EXPECT_EQ(t.launchOf(orphan), kNone);
    EXPECT_EQ(t.gpuWorkOf(a), std::vector<uint32_t> { kern });
    EXPECT_EQ(t.correlation(t.event(kern)), 42u);
    EXPECT_EQ(t.correlation(t.event(a)), 42u);
}
