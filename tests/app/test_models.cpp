#include "app/candidate_panel.h"
#include "app/diff_view.h"
#include "app/models/candidate_tree_model.h"
#include "app/models/review_queue_model.h"
#include "app/models/session_metrics.h"
#include "app/models/trace_row_model.h"
#include "session_fixture.h"

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTreeView>
#include <gtest/gtest.h>

using namespace kl::app;

namespace {

using Tester = QAbstractItemModelTester;

struct Fixture {
    QTemporaryDir tmp;
    std::filesystem::path dir;
    kl::Session session;
    std::vector<kl::Event> events;
    Fixture()
    {
        dir = std::filesystem::path(tmp.path().toStdString()) / "s";
        kl::test::writeSession(dir);
        session = kl::SessionStore::load(dir, nullptr, &events);
    }
    SessionSnapshot snapshotAfter(std::size_t n) const
    {
        kl::Session s = session;
        s.tree = kl::CandidateTree {};
        s.hypotheses.clear();
        s.evaluations.clear();
        s.reviews.clear();
        for (std::size_t i = 0; i < n && i < events.size(); ++i)
            kl::applyEvent(s, events[i]);
        return std::make_shared<const kl::Session>(std::move(s));
    }
};

std::shared_ptr<const kl::prof::Trace> syntheticTrace(int rows, int perRow, std::int64_t durNs, std::int64_t gapNs)
{
    auto trace = std::make_shared<kl::prof::Trace>();
    const auto names = { "rmsnorm_kernel", "gemm_bf16_128x128", "softmax_rows" };
    std::vector<kl::prof::StrId> ids;
    for (const char* n : names)
        ids.push_back(trace->strings().intern(n));
    for (int r = 0; r < rows; ++r) {
        const std::uint32_t row = trace->gpuRow(0, 7 + r);
        for (int i = 0; i < perRow; ++i) {
            kl::prof::Event e;
            e.start = static_cast<std::int64_t>(i) * (durNs + gapNs);
            e.end = e.start + durNs;
            e.name = ids[static_cast<std::size_t>(i) % ids.size()];
            e.row = row;
            e.kind = kl::prof::EventKind::Kernel;
            kl::prof::KernelInfo k;
            k.grid[0] = 4096;
            k.block[0] = 256;
            k.registersPerThread = 32;
            k.stream = static_cast<std::uint32_t>(7 + r);
            k.device = 0;
            trace->addKernel(e, k);
        }
    }
    trace->finalize();
    return trace;
}

} // namespace

TEST(CandidateTreeModel, ShowsTheSessionAsATreeUnderTheModelTester)
{
    Fixture f;
    CandidateTreeModel model;
    Tester tester(&model, Tester::FailureReportingMode::Fatal);
    model.setSession(std::make_shared<const kl::Session>(f.session));

    ASSERT_EQ(model.rowCount(), 1); // one root
    const QModelIndex root = model.index(0, 0);
    EXPECT_EQ(model.candidateIdAt(root), QStringLiteral("c0001"));
    // Every candidate appears exactly once, under its parent.
    std::size_t seen = 0;
    std::function<void(const QModelIndex&)> walk = [&](const QModelIndex& parent) {
        for (int r = 0; r < model.rowCount(parent); ++r) {
            const QModelIndex idx = model.index(r, 0, parent);
            const auto id = model.candidateIdAt(idx).toStdString();
            ASSERT_TRUE(f.session.tree.contains(id));
            EXPECT_EQ(QString::fromStdString(f.session.tree.at(id).parentId), model.candidateIdAt(parent));
            ++seen;
            walk(idx);
        }
    };
    walk({});
    EXPECT_EQ(seen, f.session.tree.size());

    const QModelIndex pending = model.indexOf(QStringLiteral("c0009"), CandidateTreeModel::StatusColumn);
    ASSERT_TRUE(pending.isValid());
    EXPECT_EQ(pending.data().toString(), QStringLiteral("pending review"));
    const QModelIndex rootSpeed = model.index(0, CandidateTreeModel::SpeedupColumn);
    EXPECT_EQ(rootSpeed.data().toString(), formatSpeedup(f.session.evaluations.at("c0001").objective));
    const auto best = bestCandidate(f.session);
    ASSERT_TRUE(best.has_value());
    EXPECT_TRUE(model.indexOf(QString::fromStdString(*best)).data(CandidateTreeModel::IsBestRole).toBool());
    EXPECT_TRUE(model.indexOf(QString::fromStdString(*best)).data().toString().contains(QStringLiteral("best")));
}

TEST(CandidateTreeModel, NewerSnapshotsInsertRowsWithoutReset)
{
    Fixture f;
    CandidateTreeModel model;
    Tester tester(&model, Tester::FailureReportingMode::Fatal);
    model.setSession(f.snapshotAfter(4));
    const int before = model.rowCount() > 0 ? 1 : 0;
    QSignalSpy resets(&model, &QAbstractItemModel::modelReset);
    QSignalSpy inserts(&model, &QAbstractItemModel::rowsInserted);
    for (std::size_t n = 5; n <= f.events.size(); ++n)
        model.setSession(f.snapshotAfter(n));
    EXPECT_EQ(resets.count(), 0);
    EXPECT_EQ(static_cast<std::size_t>(inserts.count()), f.session.tree.size() - static_cast<std::size_t>(before));
    // A different session resets.
    kl::Session other = f.session;
    other.id = "other";
    model.setSession(std::make_shared<const kl::Session>(other));
    EXPECT_EQ(resets.count(), 1);
    model.setSession(nullptr);
    EXPECT_EQ(model.rowCount(), 0);
}

TEST(CandidatePanel, FilterProxyStaysConsistentUnderLiveUpdates)
{
    Fixture f;
    CandidatePanel panel;
    Tester tester(panel.view()->model(), Tester::FailureReportingMode::Fatal);
    for (std::size_t n = 1; n <= f.events.size(); n += 3)
        panel.setSession(f.snapshotAfter(n));
    panel.setSession(f.snapshotAfter(f.events.size()));
    EXPECT_EQ(panel.view()->model()->rowCount(), 1);
    panel.selectCandidate(QStringLiteral("c0003"));
    EXPECT_EQ(panel.currentCandidate(), QStringLiteral("c0003"));
}

TEST(ReviewQueueModel, ListsPendingDiffsAndRefereeFlagsUntilDecided)
{
    Fixture f;
    ReviewQueueModel model;
    Tester tester(&model, Tester::FailureReportingMode::Fatal);
    model.setSession(std::make_shared<const kl::Session>(f.session));
    ASSERT_EQ(model.rowCount(), 2);
    EXPECT_EQ(model.items()[0].kind, ReviewItem::Kind::Flag);
    EXPECT_EQ(model.items()[1].kind, ReviewItem::Kind::Diff);
    EXPECT_EQ(model.candidateIdAt(1), QStringLiteral("c0009"));
    EXPECT_TRUE(
        model.index(0, ReviewQueueModel::WhatColumn).data().toString().contains(QStringLiteral("near-roofline")));

    kl::Session decided = f.session;
    decided.reviews.push_back({ "c0009", false, "no", 1 });
    model.setSession(std::make_shared<const kl::Session>(decided));
    ASSERT_EQ(model.rowCount(), 1);
    EXPECT_EQ(model.items()[0].kind, ReviewItem::Kind::Flag);
}

TEST(TraceRowModel, ListsGpuRowsFirstAndTogglesVisibility)
{
    auto trace = std::make_shared<kl::prof::Trace>();
    const auto name = trace->strings().intern("k");
    const std::uint32_t cpu = trace->cpuRow(10, 11);
    const std::uint32_t gpu = trace->gpuRow(0, 7);
    for (int i = 0; i < 10; ++i) {
        kl::prof::Event e;
        e.start = i * 100;
        e.end = e.start + 50;
        e.name = name;
        e.row = i % 2 ? cpu : gpu;
        e.kind = i % 2 ? kl::prof::EventKind::RuntimeApi : kl::prof::EventKind::Kernel;
        if (i % 2)
            trace->addEvent(e);
        else
            trace->addKernel(e, {});
    }
    trace->finalize();
    TraceRowModel model;
    Tester tester(&model, Tester::FailureReportingMode::Fatal);
    model.setTraces({ { QStringLiteral("t"), trace } });
    ASSERT_EQ(model.rowCount(), 2);
    EXPECT_TRUE(model.rows()[0].gpu);
    EXPECT_EQ(model.rows()[0].events, 5u);
    EXPECT_EQ(model.rows()[0].busyNs, 250);
    EXPECT_TRUE(model.setData(model.index(1, 0), Qt::Unchecked, Qt::CheckStateRole));
    EXPECT_FALSE(model.rows()[1].visible);
    model.setTraces(
        { { QStringLiteral("baseline"), trace }, { QStringLiteral("c0012"), syntheticTrace(1, 10, 10, 10) } });
    EXPECT_EQ(model.rowCount(), 3);
    EXPECT_TRUE(model.rows()[2].name.startsWith(QStringLiteral("c0012 · ")));
}

TEST(SideBySide, PairsChangedLinesAndPadsTheShorterSide)
{
    const auto rows = sideBySide("a\nb\nc\nd\n", "a\nB\nB2\nc\n");
    // a | B/b changed | B2 added | c | d removed
    ASSERT_EQ(rows.size(), 5u);
    EXPECT_EQ(rows[0].kind, SideBySideRow::Kind::Same);
    EXPECT_EQ(rows[1].kind, SideBySideRow::Kind::Changed);
    EXPECT_EQ(rows[1].oldText, QStringLiteral("b"));
    EXPECT_EQ(rows[1].newText, QStringLiteral("B"));
    EXPECT_EQ(rows[2].kind, SideBySideRow::Kind::Added);
    EXPECT_EQ(rows[2].oldLine, 0);
    EXPECT_EQ(rows[2].newLine, 3);
    EXPECT_EQ(rows[3].oldLine, 3);
    EXPECT_EQ(rows[3].newLine, 4);
    EXPECT_EQ(rows[4].kind, SideBySideRow::Kind::Removed);
    EXPECT_EQ(rows[4].newLine, 0);
}

TEST(SessionMetrics, LatencyIsTheGeomeanOverShapesShownToAgents)
{
    kl::Evaluation e;
    for (double us : { 2.0, 8.0, 1000.0 }) {
        kl::ShapeResult r;
        kl::TimingStats t;
        t.medianUs = us;
        r.timing = t;
        r.heldOut = us > 100;
        kl::CorrectnessStats c;
        c.relL2 = us * 1e-4;
        r.checks.push_back(c);
        e.shapes.push_back(r);
    }
    ASSERT_TRUE(latencyUs(e).has_value());
    EXPECT_NEAR(*latencyUs(e), 4.0, 1e-9);
    EXPECT_NEAR(*worstRelL2(e), 0.1, 1e-12);
    EXPECT_FALSE(baselineLatencyUs(e).has_value());
    EXPECT_EQ(formatLatency(1500), QStringLiteral("1.50 ms"));
    EXPECT_EQ(formatLatency(12.345), QStringLiteral("12.35 µs"));
}
