// .kltrace written from data KernelLoop holds (the baseline-vs-candidate profile): named GPU rows, counters bound
// to the right kernel of the right row, and the analysis classifying each plan's kernel from those counters.
#include "profiler/analysis.h"
#include "profiler/importers.h"
#include "profiler/json_reader.h"
#include "profiler/kltrace_writer.h"

#include <gtest/gtest.h>
#include <string>

namespace kl::prof {
namespace {

    KernelRecord kernel(const std::string& name, uint64_t start, uint64_t dur, uint32_t stream)
    {
        KernelRecord k;
        k.startNs = start;
        k.endNs = start + dur;
        k.stream = stream;
        k.name = name;
        k.grid[0] = 16384;
        k.block[0] = 256;
        k.registers = 24;
        return k;
    }

    SolMetrics sol(double dram, double sm, double occ, double durNs)
    {
        SolMetrics m;
        m.durationNs = durNs;
        m.dramThroughputPct = dram;
        m.smThroughputPct = sm;
        m.achievedOccupancyPct = occ;
        m.dramBytes = 5.4e8;
        return m;
    }

    // Two plans aligned at t=0, three runs each, interleaved in time: row-relative ordinals must still find them.
    std::string comparisonTrace()
    {
        KlTraceWriter w(0, "kloop profile --sol rmsnorm T=16384,H=8192");
        Device d;
        d.name = "NVIDIA H200";
        d.smCount = 132;
        d.ccMajor = 9;
        w.device(d);
        w.rowName(0, 1, "baseline");
        w.rowName(0, 2, "candidate");
        for (int run = 0; run < 3; ++run) {
            w.kernel(kernel("rmsnorm_baseline", run * 400'000, 380'000, 1), 0);
            w.kernel(kernel("rmsnorm_template", run * 300'000, 250'000, 2), 0);
        }
        w.sol(sol(55.0, 30.0, 60.0, 379'000), 0, 1, 0);
        w.sol(sol(88.0, 20.0, 93.0, 249'000), 0, 2, 0);
        w.warning("baseline: counters note \"quoted\"\nsecond line");
        return w.text();
    }

    Trace load(const std::string& text)
    {
        MemorySource src(text);
        return importKlTrace(src, "comparison.kltrace");
    }

    TEST(KlTraceWriter, PlansBecomeNamedRowsWithTheirCounters)
    {
        const Trace t = load(comparisonTrace());
        ASSERT_EQ(t.devices().size(), 1u);
        EXPECT_EQ(t.devices()[0].name, "NVIDIA H200");
        EXPECT_EQ(t.devices()[0].smCount, 132);
        uint32_t baseRow = kNone, candRow = kNone;
        for (uint32_t r = 0; r < t.rows().size(); ++r) {
            const auto name = t.strings().view(t.rows()[r].name);
            if (name == "baseline")
                baseRow = r;
            if (name == "candidate")
                candRow = r;
        }
        ASSERT_NE(baseRow, kNone);
        ASSERT_NE(candRow, kNone);
        EXPECT_EQ(t.rows().size(), 2u);
        EXPECT_EQ(t.eventsInWindow(baseRow, t.startNs(), t.endNs()).size(), 3u);
        EXPECT_EQ(t.eventsInWindow(candRow, t.startNs(), t.endNs()).size(), 3u);
        ASSERT_EQ(t.sol().size(), 2u);
        for (const auto& s : t.sol()) {
            ASSERT_LT(s.event, t.eventCount());
            const Event& e = t.event(s.event);
            // Each plan's counters sit on that plan's first run, although the other plan's kernels start earlier.
            if (s.dramThroughputPct == 88.0) {
                EXPECT_EQ(e.row, candRow);
                EXPECT_EQ(t.name(e), "rmsnorm_template");
            } else {
                EXPECT_EQ(e.row, baseRow);
                EXPECT_EQ(t.name(e), "rmsnorm_baseline");
            }
            EXPECT_EQ(e.start, 0);
        }
        ASSERT_EQ(t.meta().warnings.size(), 1u);
        EXPECT_EQ(t.meta().warnings[0], "baseline: counters note \"quoted\"\nsecond line");
        const KernelInfo* k = t.kernelInfo(t.event(t.sol()[0].event));
        ASSERT_NE(k, nullptr);
        EXPECT_EQ(k->grid[0], 16384u);
        EXPECT_EQ(k->block[0], 256u);
        EXPECT_EQ(k->registersPerThread, 24u);
    }

    TEST(KlTraceWriter, AnalysisClassifiesEachPlanFromItsCounters)
    {
        const Analysis a = analyze(load(comparisonTrace()));
        ASSERT_EQ(a.kernels.size(), 2u);
        for (const auto& k : a.kernels) {
            EXPECT_EQ(k.roofline.basis, "sol-counters") << k.name;
            EXPECT_EQ(k.count, 3u);
            if (k.name == "rmsnorm_template") {
                EXPECT_EQ(k.roofline.bound, "memory-bound");
                EXPECT_DOUBLE_EQ(k.roofline.dramPct, 88.0);
                EXPECT_DOUBLE_EQ(k.achievedOccupancyPct, 93.0);
            } else {
                EXPECT_EQ(k.roofline.bound, "memory-bound");
                EXPECT_DOUBLE_EQ(k.roofline.computePct, 30.0);
            }
        }
    }

    TEST(KlTraceWriter, RowRecordsAreOptionalAndOldReadersSkipThem)
    {
        // Without row records the rows keep their default names, and counters without "q" use the global ordinal.
        std::string text = "{\"kltrace\":1,\"pid\":1,\"cmd\":\"x\"}\n"
                           "{\"t\":\"k\",\"s\":100,\"e\":200,\"d\":0,\"q\":7,\"r\":1,\"n\":\"a\"}\n"
                           "{\"t\":\"k\",\"s\":300,\"e\":500,\"d\":0,\"q\":7,\"r\":2,\"n\":\"b\"}\n"
                           "{\"t\":\"sol\",\"n\":\"1\",\"i\":1,\"dur\":200,\"dram\":10,\"sm\":70,\"occ\":50}\n";
        const Trace t = load(text);
        ASSERT_EQ(t.rows().size(), 1u);
        EXPECT_EQ(t.strings().view(t.rows()[0].name), "GPU 0 stream 7");
        ASSERT_EQ(t.sol().size(), 1u);
        EXPECT_EQ(t.name(t.event(t.sol()[0].event)), "b");
    }

    TEST(RooflineClass, NsightThresholds)
    {
        EXPECT_EQ(rooflineClass(88, 20), "memory-bound");
        EXPECT_EQ(rooflineClass(45, 25), "memory-bound"); // below 60% but clearly the leading pipe
        EXPECT_EQ(rooflineClass(25, 45), "compute-bound");
        EXPECT_EQ(rooflineClass(10, 94), "compute-bound");
        EXPECT_EQ(rooflineClass(70, 75), "balanced");
        EXPECT_EQ(rooflineClass(20, 15), "latency-bound");
        EXPECT_EQ(rooflineClass(-1, -1), "unknown");
        EXPECT_EQ(rooflineClass(50, -1), "memory-bound");
    }

    // Both pipes low and close (the naive rmsnorm baseline on the H200: DRAM 33.1%, SM 41.1%): neither limits the
    // kernel, whichever figure is higher; Nsight Compute calls this latency-bound.
    TEST(RooflineClass, BothPipesLowAndCloseIsLatencyBound)
    {
        EXPECT_EQ(rooflineClass(33.1, 41.1), "latency-bound");
        EXPECT_EQ(rooflineClass(45, 42), "latency-bound");
        EXPECT_EQ(rooflineClass(41.1, 33.1), "latency-bound");
        EXPECT_EQ(rooflineClass(30, 59), "compute-bound");
    }

} // namespace
} // namespace kl::prof

namespace kl::prof {
namespace {

    // A real capture: kloop profile --sol on the H200 (tests/profiler/data/README.md), loaded as any file is.
    TEST(KlTraceWriter, H200ProfileSolFixtureLoadsThroughFormatDetection)
    {
        const std::string path = std::string(KL_SOURCE_DIR) + "/tests/profiler/data/h200_profile_sol_rmsnorm.kltrace";
        ASSERT_EQ(detectFormat(path), TraceFormat::KlTrace);
        const Trace t = importTraceFile(path);
        ASSERT_EQ(t.rows().size(), 2u);
        EXPECT_EQ(t.strings().view(t.rows()[0].name), "baseline");
        EXPECT_EQ(t.strings().view(t.rows()[1].name), "candidate");
        ASSERT_EQ(t.sol().size(), 2u);
        for (const auto& s : t.sol()) {
            ASSERT_LT(s.event, t.eventCount());
            const Event& e = t.event(s.event);
            EXPECT_EQ(e.start, 0) << "counters sit on each plan's first traced kernel";
            EXPECT_EQ(t.name(e), s.name);
            // bytes/duration and the DRAM % agree: rmsnorm moves 4*T*H bytes = 512 MiB here.
            EXPECT_NEAR(s.dramBytes, 4.0 * 16384 * 8192, 0.01 * 4.0 * 16384 * 8192);
        }
        const Analysis a = analyze(t);
        ASSERT_EQ(a.kernels.size(), 2u);
        for (const auto& k : a.kernels) {
            EXPECT_EQ(k.count, 5u) << k.name;
            EXPECT_EQ(k.roofline.basis, "sol-counters") << k.name;
            if (k.name == "rmsnorm_template") {
                EXPECT_EQ(k.roofline.bound, "memory-bound");
                EXPECT_GT(k.roofline.dramPct, 75.0);
            } else {
                EXPECT_EQ(k.name, "rmsnorm_baseline");
                EXPECT_LT(k.roofline.dramPct, 40.0);
                EXPECT_GT(k.achievedOccupancyPct, 90.0);
            }
        }
    }

    TEST(KlTraceWriter, HeaderComesFirstSoAnyReaderDetectsIt)
    {
        const KlTraceWriter w(7, "x \"quoted\"");
        EXPECT_EQ(w.text(), "{\"kltrace\":1,\"pid\":7,\"cmd\":\"x \\\"quoted\\\"\"}\n");
    }

} // namespace
} // namespace kl::prof
