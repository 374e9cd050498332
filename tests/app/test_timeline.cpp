#include "app/timeline_panel.h"
#include "app/timeline_view.h"
#include "profiler/kltrace_writer.h"

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QSignalSpy>
#include <QTest>
#include <gtest/gtest.h>
#include <random>

using namespace kl::app;

namespace {

// A million kernels on four streams with random durations and gaps, plus launch calls on a CPU thread.
std::shared_ptr<const kl::prof::Trace> millionEventTrace()
{
    auto trace = std::make_shared<kl::prof::Trace>();
    std::mt19937_64 rng(12345);
    std::uniform_int_distribution<int> dur(800, 40'000);
    std::uniform_int_distribution<int> gap(100, 5'000);
    std::vector<kl::prof::StrId> names;
    for (int i = 0; i < 16; ++i)
        names.push_back(trace->strings().intern("kernel_" + std::to_string(i)));
    const std::uint32_t cpu = trace->cpuRow(1, 1);
    const auto launch = trace->strings().intern("cudaLaunchKernel");
    for (int s = 0; s < 4; ++s) {
        const std::uint32_t row = trace->gpuRow(0, 7 + s);
        std::int64_t t = 0;
        for (int i = 0; i < 240'000; ++i) {
            kl::prof::Event e;
            e.start = t;
            e.end = t + dur(rng);
            e.name = names[static_cast<std::size_t>(i) % names.size()];
            e.row = row;
            e.kind = kl::prof::EventKind::Kernel;
            trace->addKernel(e, {});
            t = e.end + gap(rng);
        }
    }
    std::int64_t t = 0;
    for (int i = 0; i < 40'000; ++i) {
        kl::prof::Event e;
        e.start = t;
        e.end = t + 3'000;
        e.name = launch;
        e.row = cpu;
        e.kind = kl::prof::EventKind::RuntimeApi;
        trace->addEvent(e);
        t += 20'000;
    }
    trace->finalize();
    return trace;
}

std::size_t bruteForceCount(const kl::prof::Trace& trace, std::int64_t t0, std::int64_t t1)
{
    std::size_t n = 0;
    for (const auto& e : trace.events()) {
        if (e.end >= t0 && e.start <= t1)
            ++n;
    }
    return n;
}

} // namespace

TEST(Timeline, ZoomPanAndSelectionOnAMillionEvents)
{
    const auto trace = millionEventTrace();
    ASSERT_EQ(trace->eventCount(), 1'000'000u);
    TimelinePanel panel;
    panel.resize(1400, 500);
    panel.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&panel));
    panel.setTraces({ { QStringLiteral("synthetic"), trace } });
    TimelineView* view = panel.view();
    ASSERT_EQ(panel.rowModel()->rowCount(), 5);
    EXPECT_EQ(view->viewStart(), 0.0);
    EXPECT_GE(view->viewEnd(), static_cast<double>(trace->endNs()));

    // Whole trace: level of detail merges sub-pixel runs, so a paint draws at most a few items per pixel and row.
    QElapsedTimer clock;
    clock.start();
    view->grab();
    const qint64 fullPaintMs = clock.elapsed();
    EXPECT_GT(view->lastPaintItems(), 0u);
    EXPECT_LT(view->lastPaintItems(), 5u * 2u * 1400u);

    // Wheel zoom around the cursor keeps the time under the cursor fixed.
    const QPoint at(700, 100);
    const double anchor = view->timeAtX(at.x());
    for (int i = 0; i < 20; ++i) {
        QWheelEvent wheel(at, view->mapToGlobal(at), QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier,
            Qt::NoScrollPhase, false);
        QApplication::sendEvent(view, &wheel);
    }
    EXPECT_NEAR(view->timeAtX(at.x()), anchor, (view->viewEnd() - view->viewStart()) / 500);
    EXPECT_LT(view->viewEnd() - view->viewStart(), static_cast<double>(trace->endNs()) / 50);
    clock.restart();
    view->grab();
    const qint64 zoomedPaintMs = clock.elapsed();
    std::printf("[ timeline ] 1M events: full view %lld ms (%zu items), zoomed %lld ms (%zu items)\n",
        static_cast<long long>(fullPaintMs), view->lastPaintItems(), static_cast<long long>(zoomedPaintMs),
        view->lastPaintItems());

    // Drag pans by the dragged time.
    const double before = view->viewStart();
    const double nsPerPx = (view->viewEnd() - view->viewStart()) / (view->width() - 220);
    QTest::mousePress(view, Qt::LeftButton, Qt::NoModifier, QPoint(800, 100));
    QTest::mouseMove(view, QPoint(700, 100));
    QTest::mouseRelease(view, Qt::LeftButton, Qt::NoModifier, QPoint(700, 100));
    EXPECT_NEAR(view->viewStart() - before, 100 * nsPerPx, 2 * nsPerPx);

    // Rubber-band selection (Shift+drag) reports statistics that match a brute-force count.
    view->resetView();
    QSignalSpy stats(view, &TimelineView::selectionStatsReady);
    QTest::mousePress(view, Qt::LeftButton, Qt::ShiftModifier, QPoint(400, 100));
    QTest::mouseMove(view, QPoint(600, 100));
    QTest::mouseRelease(view, Qt::LeftButton, Qt::ShiftModifier, QPoint(600, 100));
    ASSERT_TRUE(view->hasSelection());
    ASSERT_TRUE(stats.wait(10000));
    const auto s = stats.at(0).at(0).value<SelectionStats>();
    EXPECT_EQ(s.events, bruteForceCount(*trace, view->selectionStart(), view->selectionEnd()));
    EXPECT_GT(s.gpuBusyNs, 0);
    EXPECT_FALSE(s.topKernels.empty());
    EXPECT_TRUE(panel.selectionText().contains(QStringLiteral("events")));

    // Zoomed in to 200 µs every event is wider than a pixel: each one is drawn on its own.
    view->setViewRange(0, 200'000);
    view->grab();
    EXPECT_EQ(view->lastPaintItems(), bruteForceCount(*trace, 0, 200'000));

    // Tooltips name the kernel under the cursor.
    const auto& first = trace->event(trace->rows()[panel.rowModel()->rows()[0].row].lanes[0][0]);
    const int x = view->xForTime((first.start + first.end) / 2.0);
    const QString tip = view->tooltipAt(QPoint(x, 26 + 8));
    EXPECT_TRUE(tip.contains(QString::fromUtf8(trace->name(first).data(), static_cast<int>(trace->name(first).size()))))
        << tip.toStdString();
}

// What `kloop profile --sol` writes: the baseline's and the candidate's runs as two named rows starting together,
// with speed-of-light counters on each plan's first run.
TEST(Timeline, ProfileSolTraceShowsBaselineAboveCandidateWithCounters)
{
    kl::prof::KlTraceWriter w(0, "kloop profile --sol rmsnorm T=16384,H=8192");
    kl::prof::Device d;
    d.name = "NVIDIA H200";
    w.device(d);
    w.rowName(0, 1, "baseline");
    w.rowName(0, 2, "candidate");
    for (int run = 0; run < 3; ++run) {
        kl::KernelRecord b;
        b.startNs = run * 400'000;
        b.endNs = b.startNs + 335'000;
        b.stream = 1;
        b.name = "rmsnorm_baseline";
        w.kernel(b, 0);
        kl::KernelRecord c = b;
        c.startNs = run * 150'000;
        c.endNs = c.startNs + 132'000;
        c.stream = 2;
        c.name = "rmsnorm_template";
        w.kernel(c, 0);
    }
    kl::prof::SolMetrics base;
    base.durationNs = 335'000;
    base.dramThroughputPct = 32.0;
    base.smThroughputPct = 41.5;
    base.achievedOccupancyPct = 95.8;
    w.sol(base, 0, 1, 0);
    kl::prof::SolMetrics cand = base;
    cand.dramThroughputPct = 81.0;
    cand.smThroughputPct = 38.0;
    cand.achievedOccupancyPct = 35.5;
    w.sol(cand, 0, 2, 0);
    const QString path
        = QDir::temp().filePath(QStringLiteral("kl-timeline-sol-%1.kltrace").arg(QCoreApplication::applicationPid()));
    {
        QFile f(path);
        ASSERT_TRUE(f.open(QIODevice::WriteOnly));
        f.write(QByteArray::fromStdString(w.text()));
    }

    TimelinePanel panel;
    panel.resize(1200, 400);
    panel.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&panel));
    QSignalSpy loaded(&panel, &TimelinePanel::traceLoaded);
    panel.loadTrace(path);
    ASSERT_TRUE(loaded.wait(10000));
    QFile::remove(path);
    const auto& rows = panel.rowModel()->rows();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].name, QStringLiteral("baseline"));
    EXPECT_EQ(rows[1].name, QStringLiteral("candidate"));
    EXPECT_EQ(rows[0].events, 3u);
    EXPECT_EQ(rows[1].events, 3u);
    EXPECT_EQ(panel.view()->viewStart(), 0.0);

    // The top row's first kernel carries its counters in the tooltip; a later run of it has none.
    const auto& trace = *panel.rowModel()->traces()[0].trace;
    auto baselineTip = [&](std::size_t nth) {
        const auto& e = trace.event(trace.rows()[rows[0].row].lanes[0][nth]);
        panel.view()->setViewRange(static_cast<double>(e.start - 1000), static_cast<double>(e.end + 1000));
        const int x = panel.view()->xForTime((static_cast<double>(e.start) + static_cast<double>(e.end)) / 2.0);
        return panel.view()->tooltipAt(QPoint(x, 26 + 8));
    };
    const QString first = baselineTip(0);
    EXPECT_TRUE(first.contains(QStringLiteral("rmsnorm_baseline"))) << first.toStdString();
    EXPECT_TRUE(first.contains(QStringLiteral("DRAM 32.0%"))) << first.toStdString();
    // DRAM 32%, SM 41.5%: both pipes low and close, so neither limits it (not "compute-bound").
    EXPECT_TRUE(first.contains(QStringLiteral("latency-bound"))) << first.toStdString();
    EXPECT_FALSE(first.contains(QStringLiteral("compute-bound"))) << first.toStdString();
    const QString second = baselineTip(1);
    EXPECT_TRUE(second.contains(QStringLiteral("rmsnorm_baseline"))) << second.toStdString();
    EXPECT_FALSE(second.contains(QStringLiteral("speed of light"))) << second.toStdString();
}

// The bundled H200 PyTorch trace: stream 7 carries 1.46 s of gpu_user_annotation ranges around 9.8 ms of kernels.
// Busy is the kernels' time, as the Bottleneck panel says.
TEST(Timeline, BusyColumnCountsGpuWorkNotAnnotationRanges)
{
    const QString path = QStringLiteral(
        KL_SOURCE_DIR "/resources/demo-session/traces/h200_transformer_prefill_decode.pt.trace.json.gz");
    if (!QFile::exists(path))
        GTEST_SKIP() << "no bundled trace";
    TimelinePanel panel;
    QSignalSpy loaded(&panel, &TimelinePanel::traceLoaded);
    panel.loadTrace(path);
    ASSERT_TRUE(loaded.wait(20000));
    const auto& trace = *panel.rowModel()->traces()[0].trace;
    const auto& rows = panel.rowModel()->rows();
    bool sawStream = false;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& row = trace.rows()[rows[i].row];
        if (row.kind != kl::prof::RowKind::GpuStream || row.tid != 7)
            continue;
        sawStream = true;
        std::size_t annotations = 0;
        for (const auto& lane : row.lanes)
            for (std::uint32_t e : lane)
                annotations += trace.event(e).kind == kl::prof::EventKind::GpuAnnotation;
        EXPECT_GT(annotations, 0u) << "the fixture's stream 7 carries annotation ranges";
        EXPECT_GT(rows[i].busyNs, 9'700'000);
        EXPECT_LT(rows[i].busyNs, 9'900'000) << "annotation ranges counted as busy time";
        const QString shown = panel.rowModel()
                                  ->data(panel.rowModel()->index(static_cast<int>(i), TraceRowModel::BusyColumn))
                                  .toString();
        EXPECT_TRUE(shown.startsWith(QStringLiteral("9.8"))) << shown.toStdString();
        EXPECT_TRUE(shown.endsWith(QStringLiteral("ms"))) << shown.toStdString();
    }
    EXPECT_TRUE(sawStream);
}
