#include "profiler/analysis.h"
#include "profiler/importers.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <unistd.h>

using namespace kl::prof;

namespace {

constexpr int64_t us = 1000;

struct Builder {
    Trace t;
    uint32_t cpu = t.cpuRow(100, 100);
    uint32_t gpu = t.gpuRow(0, 7);
    uint32_t corr = 1;

    uint32_t api(const char* name, int64_t s, int64_t e, uint32_t c = 0)
    {
        Event x;
        x.start = s;
        x.end = e;
        x.row = cpu;
        x.kind = EventKind::RuntimeApi;
        x.name = t.strings().intern(name);
        return t.addEvent(x, c);
    }
    // A launch call [s, s+launchNs] and its kernel [ks, ks+dur].
    uint32_t launch(const char* kernel, int64_t s, int64_t launchNs, int64_t ks, int64_t dur)
    {
        uint32_t c = corr++;
        api("cudaLaunchKernel", s, s + launchNs, c);
        Event k;
        k.start = ks;
        k.end = ks + dur;
        k.row = gpu;
        k.name = t.strings().intern(kernel);
        KernelInfo ki;
        ki.correlation = c;
        ki.device = 0;
        ki.stream = 7;
        return t.addKernel(k, ki);
    }
    void range(const char* name, int64_t s, int64_t e)
    {
        Event r;
        r.start = s;
        r.end = e;
        r.row = cpu;
        r.kind = EventKind::NvtxRange;
        r.name = t.strings().intern(name);
        t.addEvent(r);
    }
};

} // namespace

TEST(Analysis, ManyShortKernelsWithGapsAreLaunchOverhead)
{
    Builder b;
    Device h200;
    h200.name = "NVIDIA H200";
    h200.smCount = 132;
    h200.ccMajor = 9;
    b.t.addDevice(h200);
    b.range("decode", 0, 100 * 6 * us);
    // Each iteration: a 4 us launch call, then the 1 us kernel starts 1 us after the call returns.
    for (int i = 0; i < 100; ++i)
        b.launch("tiny", i * 6 * us, 4 * us, i * 6 * us + 5 * us, 1 * us);
    b.t.finalize();
    Analysis a = analyze(b.t);
    EXPECT_EQ(a.bottleneck, "launch-overhead");
    ASSERT_EQ(a.devices.size(), 1u);
    const DeviceBusy& d = a.devices[0];
    EXPECT_EQ(d.busyNs, 100 * us);
    EXPECT_EQ(d.windowNs, 99 * 6 * us + 1 * us);
    EXPECT_EQ(d.gaps, 99u);
    // Each 5 us gap: the next launch call runs for 4 us of it, then 1 us in the queue.
    EXPECT_EQ(d.idle.launchNs, 99 * 4 * us);
    EXPECT_EQ(d.idle.queuedNs, 99 * 1 * us);
    EXPECT_EQ(d.idle.hostNs, 0);
    EXPECT_EQ(d.idle.syncNs, 0);
    EXPECT_DOUBLE_EQ(d.medianLaunchApiNs, 4 * us);
    EXPECT_DOUBLE_EQ(d.medianLaunchLatencyNs, 1 * us);
    ASSERT_EQ(a.launchPhases.size(), 1u);
    const LaunchPhase& p = a.launchPhases[0];
    EXPECT_EQ(p.kernels, 100u);
    EXPECT_EQ(p.label, "decode");
    EXPECT_DOUBLE_EQ(p.medianKernelNs, 1 * us);
    EXPECT_DOUBLE_EQ(p.medianGapNs, 5 * us);
    // CUDA graphs: busy 100 us + 100 nodes x 0.5 us.
    EXPECT_EQ(p.estimatedWithGraphsNs, 150 * us);
    EXPECT_NEAR(p.estimatedSpeedup, 595.0 / 150.0, 1e-9);
    ASSERT_EQ(a.ranges.size(), 1u);
    EXPECT_EQ(a.ranges[0].kernels, 100u);
    EXPECT_EQ(a.ranges[0].gpuNs, 100 * us);
    std::string text = toText(a);
    EXPECT_NE(text.find("Bottleneck: launch-overhead"), std::string::npos) << text;
    EXPECT_NE(text.find("Launch-bound phase 'decode'"), std::string::npos) << text;
}

TEST(Analysis, IdleAttributedToSyncAndHostWork)
{
    Builder b;
    // Kernel 100 us; host syncs until 40 us after it ends, does 10 us of Python, launches again (4 us).
    int64_t t0 = 0;
    for (int i = 0; i < 10; ++i) {
        b.launch("big", t0, 4 * us, t0 + 5 * us, 100 * us);
        int64_t kEnd = t0 + 105 * us;
        b.api("cudaDeviceSynchronize", t0 + 6 * us, kEnd + 40 * us);
        t0 = kEnd + 50 * us;
    }
    b.t.finalize();
    Analysis a = analyze(b.t);
    const DeviceBusy& d = a.devices[0];
    // Gaps: [kEnd, next kernel start] = 40 sync + 10 host + 4 launch + 1 queued = 55 us, 9 of them.
    EXPECT_EQ(d.gaps, 9u);
    EXPECT_EQ(d.idle.syncNs, 9 * 40 * us);
    EXPECT_EQ(d.idle.hostNs, 9 * 10 * us);
    EXPECT_EQ(d.idle.launchNs, 9 * 4 * us);
    EXPECT_EQ(d.idle.queuedNs, 9 * 1 * us);
    EXPECT_EQ(a.bottleneck, "synchronization");
    EXPECT_TRUE(a.launchPhases.empty()); // 100 us kernels are not launch-bound
}

TEST(Analysis, KernelStatisticsAndRooflineClasses)
{
    Builder b;
    // copy: 1 ms moving 4.27 GB -> 100% of the H200 copy ceiling; fma: 1 ms doing 28 GFLOP -> 50% of 56 TFLOP/s;
    // small: 20 us touching 1 MB -> latency-bound.
    int64_t at = 0;
    auto run = [&](const char* n, int64_t dur) {
        b.launch(n, at, 2 * us, at + 3 * us, dur);
        at += dur + 10 * us;
    };
    run("k_copy", 1000 * us);
    run("k_copy", 1000 * us);
    run("k_fma", 1000 * us);
    run("k_small", 20 * us);
    run("k_small", 30 * us);
    run("k_sol", 500 * us);
    b.t.finalize();
    SolMetrics sol;
    for (uint32_t i = 0; i < b.t.eventCount(); ++i)
        if (b.t.name(b.t.event(i)) == "k_sol")
            sol.event = i;
    sol.durationNs = 500 * us;
    sol.dramThroughputPct = 12;
    sol.smThroughputPct = 91;
    sol.achievedOccupancyPct = 48;
    b.t.addSol(sol);
    AnalysisOptions o;
    o.ceilings = Ceilings::h200();
    o.work = { { "k_copy", 0, 4.27e9, false }, { "k_fma", 28e9, 1e3, false }, { "k_small", 1e3, 1e6, false } };
    Analysis a = analyze(b.t, o);
    ASSERT_EQ(a.kernels.size(), 4u);
    EXPECT_EQ(a.kernelCount, 6u);
    EXPECT_EQ(a.kernelNs, (3000 + 50 + 500) * us);
    const KernelStat& copy = a.kernels[0];
    EXPECT_EQ(copy.name, "k_copy");
    EXPECT_EQ(copy.count, 2u);
    EXPECT_NEAR(copy.share, 2000.0 / 3550.0, 1e-12);
    EXPECT_EQ(copy.roofline.bound, "memory-bound");
    EXPECT_NEAR(copy.roofline.dramPct, 100.0, 1e-9);
    const KernelStat& fma = a.kernels[1];
    EXPECT_EQ(fma.roofline.bound, "compute-bound");
    EXPECT_NEAR(fma.roofline.computePct, 50.0, 1e-9);
    const KernelStat& solK = a.kernels[2];
    EXPECT_EQ(solK.name, "k_sol");
    EXPECT_EQ(solK.roofline.basis, "sol-counters");
    EXPECT_EQ(solK.roofline.bound, "compute-bound");
    EXPECT_DOUBLE_EQ(solK.achievedOccupancyPct, 48);
    const KernelStat& small = a.kernels[3];
    EXPECT_DOUBLE_EQ(small.medianNs, 25 * us); // even count: mean of the middle two
    EXPECT_EQ(small.minNs, 20 * us);
    EXPECT_EQ(small.maxNs, 30 * us);
    EXPECT_EQ(small.roofline.bound, "latency-bound");
    double shares = 0;
    for (const auto& k : a.kernels)
        shares += k.share;
    EXPECT_NEAR(shares, 1.0, 1e-12);
    EXPECT_EQ(a.bottleneck, "memory-bound"); // GPU busy; the top kernel decides
    nlohmann::json j = toJson(a);
    EXPECT_EQ(j["kernels"][0]["roofline"]["bound"], "memory-bound");
    EXPECT_EQ(j["devices"][0]["gaps"], 5);
}

TEST(Analysis, EmptyTraceHasNoGpuWork)
{
    Trace t;
    t.finalize();
    Analysis a = analyze(t);
    EXPECT_EQ(a.bottleneck, "no-gpu-work");
    EXPECT_FALSE(toText(a).empty());
}

// Golden analyses of the committed fixtures: regenerate with KL_UPDATE_GOLDEN=1 after an intended change and
// review the diff (the fixture notes explain why each verdict is right).
class GoldenAnalysis : public ::testing::TestWithParam<const char*> { };

TEST_P(GoldenAnalysis, MatchesCommittedSummary)
{
    std::string base = std::string(KL_SOURCE_DIR) + "/tests/profiler/data/" + GetParam();
    std::ifstream probe(base);
    if (!probe)
        GTEST_SKIP() << base << " not present";
    Trace t = importTraceFile(base);
    nlohmann::json got = toJson(analyze(t));
    std::string goldenPath = base + ".analysis.json";
    if (const char* u = std::getenv("KL_UPDATE_GOLDEN"); u && std::string(u) == "1") {
        std::ofstream(goldenPath) << got.dump(2) << "\n";
        GTEST_SKIP() << "golden updated";
    }
    std::ifstream in(goldenPath);
    ASSERT_TRUE(in) << "missing " << goldenPath;
    nlohmann::json want = nlohmann::json::parse(in);
    EXPECT_EQ(got["bottleneck"], want["bottleneck"]);
    EXPECT_EQ(got["kernel_count"], want["kernel_count"]);
    EXPECT_EQ(got["kernel_ns"], want["kernel_ns"]);
    EXPECT_EQ(got["devices"], want["devices"]);
    EXPECT_EQ(got["kernels"], want["kernels"]);
    EXPECT_EQ(got["ranges"], want["ranges"]);
    EXPECT_EQ(got["launch_phases"], want["launch_phases"]);
    EXPECT_EQ(got["findings"], want["findings"]);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenAnalysis,
    ::testing::Values("nsys_synthetic.sqlite", "h200_transformer_prefill_decode.pt.trace.json.gz",
        "h200_kloop_profile_testprog.kltrace.gz"),
    [](const ::testing::TestParamInfo<const char*>& p) {
        std::string n = p.param;
        for (char& c : n)
            if (!std::isalnum(static_cast<unsigned char>(c)))
                c = '_';
        return n;
    });

// Facts about the H200 fixtures that follow from the programs that produced them (see data/README.md).
TEST(RealFixtures, KloopProfileOfTheTestProgram)
{
    Trace t
        = importTraceFile(std::string(KL_SOURCE_DIR) + "/tests/profiler/data/h200_kloop_profile_testprog.kltrace.gz");
    size_t kernels = 0, linked = 0, ranges = 0, marks = 0;
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        const Event& e = t.event(i);
        if (e.kind == EventKind::Kernel) {
            ++kernels;
            linked += t.launchOf(i) != kNone;
        }
        ranges += e.kind == EventKind::NvtxRange;
        marks += e.kind == EventKind::NvtxMark;
    }
    EXPECT_EQ(kernels, 3u + 1u + 2000u + 50u); // copy x3, fma, launch-bound burst, sync-per-kernel loop
    EXPECT_EQ(linked, kernels);
    EXPECT_EQ(ranges, 5u);
    EXPECT_EQ(marks, 1u);
    Analysis a = analyze(t);
    EXPECT_EQ(a.bottleneck, "launch-overhead");
    ASSERT_FALSE(a.launchPhases.empty());
    EXPECT_EQ(a.launchPhases[0].label, "launch-bound phase");
    EXPECT_GE(a.launchPhases[0].kernels, 2000u);
    EXPECT_LT(a.launchPhases[0].medianKernelNs, 2000); // k_tiny runs < 1 us on the H200
    EXPECT_EQ(a.kernels[0].name, "k_copy(float4 const*, float4*, unsigned long)");
    // 3 copies of 2 x 1 GiB in ~540 us each: ~3.97 TB/s, the copy ceiling measured on this GPU.
    double bytesPerSec = 2.0 * (64ull << 20) * 16 / (a.kernels[0].medianNs * 1e-9);
    EXPECT_GT(bytesPerSec, 3.5e12);
    EXPECT_LT(bytesPerSec, 4.5e12);
}

TEST(RealFixtures, PyTorchTransformerPrefillAndDecode)
{
    Trace t = importTraceFile(
        std::string(KL_SOURCE_DIR) + "/tests/profiler/data/h200_transformer_prefill_decode.pt.trace.json.gz");
    ASSERT_EQ(t.devices().size(), 1u);
    EXPECT_EQ(t.devices()[0].name, "NVIDIA H200");
    Analysis a = analyze(t);
    EXPECT_EQ(a.kernelCount, 2689u);
    EXPECT_EQ(a.bottleneck, "host-bound");
    ASSERT_FALSE(a.hostIdleByCpuOp.empty());
    // The decode loop sees a new KV length every step; cuDNN's SDPA builds a new plan each time on the host.
    EXPECT_NE(a.hostIdleByCpuOp[0].first.find("cudnn_attention"), std::string::npos);
    ASSERT_GE(a.ranges.size(), 2u);
    EXPECT_EQ(a.ranges[0].name, "decode_step");
    EXPECT_EQ(a.ranges[0].instances, 32u);
    bool prefill = false;
    for (const auto& r : a.ranges)
        prefill |= r.name == "prefill" && r.instances == 1;
    EXPECT_TRUE(prefill);
    EXPECT_GT(a.launchPhaseCount, 16u); // most decode steps are runs of few-us kernels with long gaps
    // Every kernel and memcpy was linked to its cudaLaunchKernel / cudaMemcpyAsync through "correlation".
    size_t gpu = 0, linked = 0;
    for (uint32_t i = 0; i < t.eventCount(); ++i)
        if (isGpuWork(t.event(i).kind)) {
            ++gpu;
            linked += t.launchOf(i) != kNone;
        }
    EXPECT_EQ(linked, gpu);
}

namespace {

// The QA trial's GPU-only trace: 20 kernels of 1 ms every 10 ms on stream 7, no CPU events; `extra` adds events.
Trace gpuOnlyTrace(const std::string& extra = {})
{
    std::string json = "{\"traceEvents\":[";
    for (int i = 0; i < 20; ++i)
        json += (i ? "," : "") + std::string("{\"ph\":\"X\",\"name\":\"big_gemm\",\"cat\":\"kernel\",\"ts\":")
            + std::to_string(i * 10000) + ",\"dur\":1000,\"pid\":0,\"tid\":7,\"args\":{\"device\":0,\"stream\":7}}";
    json += extra + "]}";
    const std::string path = ::testing::TempDir() + "kl_gpu_only_" + std::to_string(::getpid()) + ".json";
    std::ofstream(path) << json;
    Trace t = importTraceFile(path);
    std::remove(path.c_str());
    return t;
}

} // namespace

TEST(Analysis, AMostlyIdleGpuOnlyTraceIsReportedAsUnexplainedIdleNotGpuBound)
{
    const Analysis a = analyze(gpuOnlyTrace());
    ASSERT_EQ(a.devices.size(), 1u);
    EXPECT_NEAR(a.devices[0].busyPct, 100.0 * 20 / 191, 0.01); // 20 ms busy of 191 ms
    EXPECT_EQ(a.devices[0].idle.unattributedNs, a.devices[0].windowNs - a.devices[0].busyNs);
    EXPECT_EQ(a.bottleneck, "gpu-idle");
    ASSERT_FALSE(a.findings.empty());
    EXPECT_NE(a.findings[0].find("no CPU launch records"), std::string::npos) << a.findings[0];
    EXPECT_NE(toText(a).find("Bottleneck: gpu-idle"), std::string::npos);
}

TEST(Analysis, ABusyGpuOnlyTraceIsStillGpuBound)
{
    // Back-to-back kernels: no idle to explain, so the verdict stays with the GPU.
    Builder b;
    for (int i = 0; i < 10; ++i) {
        Event k;
        k.start = i * 100 * us;
        k.end = k.start + 99 * us;
        k.row = b.gpu;
        k.name = b.t.strings().intern("big_gemm");
        b.t.addKernel(k, KernelInfo {});
    }
    b.t.finalize();
    EXPECT_EQ(analyze(b.t).bottleneck, "gpu-bound");
}

TEST(TraceModel, AnEventFarFromTheRestIsWarnedAboutAndLeftOutOfSpans)
{
    const Trace t = gpuOnlyTrace(",{\"ph\":\"X\",\"name\":\"glitch\",\"cat\":\"kernel\",\"ts\":-1e12,\"dur\":5,"
                                 "\"pid\":0,\"tid\":7,\"args\":{\"device\":0,\"stream\":7}}");
    EXPECT_EQ(t.endNs() - t.startNs(), 191'000'000) << "the span is the 20 kernels', not 1,000,000 s";
    bool warned = false;
    for (const auto& w : t.meta().warnings)
        warned |= w.find("1 event lies more than an hour away") != std::string::npos
            && w.find("'glitch'") != std::string::npos;
    EXPECT_TRUE(warned) << ::testing::PrintToString(t.meta().warnings);
    std::size_t kernels = 0;
    for (const auto& e : t.events())
        kernels += e.kind == EventKind::Kernel;
    EXPECT_EQ(kernels, 20u);
    const Analysis a = analyze(t);
    EXPECT_EQ(a.devices[0].windowNs, 191'000'000);
    EXPECT_NEAR(a.devices[0].busyPct, 100.0 * 20 / 191, 0.01);
    bool reported = false;
    for (const auto& w : a.warnings)
        reported |= w.find("clock glitch") != std::string::npos;
    EXPECT_TRUE(reported) << "the analysis passes the trace's warning on";
}

TEST(TraceModel, TwoRealBurstsAnHourApartAreBothKept)
{
    // A second burst with as many events is a second phase of the run, not a glitch.
    std::string extra;
    for (int i = 0; i < 20; ++i)
        extra += ",{\"ph\":\"X\",\"name\":\"later\",\"cat\":\"kernel\",\"ts\":" + std::to_string(7.2e9 + i * 10000)
            + ",\"dur\":1000,\"pid\":0,\"tid\":7,\"args\":{\"device\":0,\"stream\":7}}";
    const Trace t = gpuOnlyTrace(extra);
    EXPECT_EQ(t.eventCount(), 40u);
    EXPECT_GT(t.endNs() - t.startNs(), int64_t(7'000'000'000'000));
}

TEST(TraceModel, BusyTimeOfAGpuStreamIsItsWorkNotItsAnnotationRanges)
{
    Trace t = importTraceFile(
        std::string(KL_SOURCE_DIR) + "/tests/profiler/data/h200_transformer_prefill_decode.pt.trace.json.gz");
    const Analysis a = analyze(t);
    bool checked = false;
    for (uint32_t r = 0; r < t.rows().size(); ++r) {
        const Row& row = t.rows()[r];
        if (row.kind != RowKind::GpuStream || row.tid != 7)
            continue;
        int64_t annotated = 0;
        for (const auto& lane : row.lanes)
            for (uint32_t e : lane)
                if (t.event(e).kind == EventKind::GpuAnnotation)
                    annotated += t.event(e).duration();
        EXPECT_GT(annotated, int64_t(1'000'000'000)) << "the fixture's stream 7 has > 1 s of annotation ranges";
        const int64_t busy = t.busyNs(r);
        EXPECT_GT(busy, 9'700'000);
        EXPECT_LT(busy, 9'900'000);
        ASSERT_FALSE(a.devices.empty());
        for (const auto& s : a.devices[0].streams) {
            if (s.stream == 7) {
                EXPECT_EQ(s.busyNs, busy) << "one rule for the analysis and the workbench's Busy column";
            }
        }
        checked = true;
    }
    EXPECT_TRUE(checked);
}

TEST(Analysis, TheNaiveBaselineWithBothPipesLowIsNotComputeBound)
{
    Trace t = importTraceFile(std::string(KL_SOURCE_DIR) + "/tests/profiler/data/h200_profile_sol_rmsnorm.kltrace");
    const Analysis a = analyze(t);
    bool sawBaseline = false;
    for (const auto& k : a.kernels) {
        if (k.roofline.basis != "sol-counters" || k.roofline.dramPct >= 40 || k.roofline.computePct < 40)
            continue;
        sawBaseline = true; // DRAM ~33 %, SM ~41 %
        EXPECT_EQ(k.roofline.bound, "latency-bound") << k.name;
    }
    EXPECT_TRUE(sawBaseline);
    EXPECT_NE(a.bottleneck, "compute-bound");
}
