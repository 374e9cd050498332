// The pipeline view from a recorded pipeline result (tests/app/fixtures, the worker's pipeline reply as
// `kloop pipeline run --json` writes it): its stage model under QAbstractItemModelTester, the strip, the end-to-end
// summary, and a stage that breaks capture shown and rejected by name.
#include "app/main_window.h"
#include "app/models/pipeline_stage_model.h"
#include "app/pipeline_panel.h"
#include "core/session_store.h"

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QDockWidget>
#include <QImage>
#include <QTemporaryDir>
#include <fstream>
#include <gtest/gtest.h>

using namespace kl::app;

namespace {
const QString kFixture = QStringLiteral(KL_SOURCE_DIR "/tests/app/fixtures/pipeline_result_llama_mlp_decode.json");

kl::PipelineResult fixture()
{
    return kl::pipelineResultFromJson(kl::Json::parse(kl::readFile(kFixture.toStdString())), kFixture.toStdString());
}

QString cell(const PipelineStageModel& m, int row, int column)
{
    return m.data(m.index(row, column)).toString();
}
} // namespace

TEST(PipelineStageModel, PassesTheModelTesterThroughUpdatesAndResets)
{
    PipelineStageModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    const kl::PipelineResult r = fixture();
    model.setStages(r.shapes[0].stages);
    ASSERT_EQ(model.rowCount(), 4);
    EXPECT_EQ(cell(model, 2, PipelineStageModel::ImplColumn), "candidate c0007 of runs/silu");
    EXPECT_TRUE(model.index(2, 0).data(PipelineStageModel::DiffersRole).toBool());
    EXPECT_FALSE(model.index(1, 0).data(PipelineStageModel::DiffersRole).toBool());
    int changed = 0, resets = 0;
    QObject::connect(&model, &QAbstractItemModel::dataChanged, [&] { ++changed; });
    QObject::connect(&model, &QAbstractItemModel::modelReset, [&] { ++resets; });
    model.setStages(r.shapes[2].stages); // the same stages at another shape: rows kept
    EXPECT_EQ(changed, 1);
    EXPECT_EQ(resets, 0);
    std::vector<kl::PipelineStageResult> fewer(r.shapes[0].stages.begin(), r.shapes[0].stages.begin() + 2);
    model.setStages(fewer);
    EXPECT_EQ(resets, 1);
    EXPECT_EQ(model.rowCount(), 2);
    model.setStages({});
    EXPECT_EQ(model.rowCount(), 0);
}

TEST(PipelineView, ShowsTheRecordedResultAsAStripWithItsSummary)
{
    PipelinePanel panel;
    panel.resize(900, 500);
    ASSERT_TRUE(panel.loadFile(kFixture)) << panel.error().toStdString();
    EXPECT_EQ(panel.shapes()->count(), 3);
    EXPECT_EQ(panel.shapes()->itemText(1), "H=4096,I=8192,T=16");
    panel.selectShape(1);
    const kl::PipelineShapeResult& s = panel.result().shapes[1];
    // The speedup with its interval, MFU and MBU as recorded.
    EXPECT_TRUE(panel.summary().contains(QStringLiteral("one CUDA graph"))) << panel.summary().toStdString();
    EXPECT_TRUE(panel.summary().contains(QStringLiteral("%1x [%2, %3]")
                                             .arg(s.speedup, 0, 'f', 3)
                                             .arg(s.speedupCiLow, 0, 'f', 3)
                                             .arg(s.speedupCiHigh, 0, 'f', 3)))
        << panel.summary().toStdString();
    EXPECT_TRUE(panel.summary().contains(QStringLiteral("MBU %1%").arg(100 * s.mbu, 0, 'f', 1)))
        << panel.summary().toStdString();
    EXPECT_TRUE(panel.graphCheck().contains(QStringLiteral("end-to-end:graph passes")));
    EXPECT_TRUE(panel.graphCheck().contains(QStringLiteral("%1 us eager").arg(s.eager->medianUs, 0, 'f', 2)));
    EXPECT_EQ(panel.verdict(), "Accepted");
    EXPECT_EQ(cell(*panel.model(), 1, PipelineStageModel::ShareColumn),
        QStringLiteral("%1%").arg(100 * s.stages[1].share, 0, 'f', 1));

    // The strip: each stage as wide as its share, in order, filling the bar.
    panel.show();
    const QRectF gateUp = panel.strip()->stageRect(1), act = panel.strip()->stageRect(2);
    EXPECT_NEAR(gateUp.width() / act.width(), s.stages[1].share / s.stages[2].share, 0.01);
    EXPECT_NEAR(panel.strip()->stageRect(0).right(), gateUp.left(), 0.5);
    EXPECT_NEAR(panel.strip()->stageRect(3).right(), panel.strip()->width() - 1, 1.0);
    const QImage image = panel.strip()->grab().toImage();
    const QColor candidate = panel.strip()->palette().color(QPalette::Highlight);
    const QColor baseline = panel.strip()->palette().color(QPalette::Mid);
    EXPECT_EQ(image.pixelColor(act.left() + 1, 2), candidate);
    EXPECT_EQ(image.pixelColor(gateUp.left() + 1, 2), baseline);
}

TEST(PipelineView, ShowsEachOutputsEndToEndBudgetWithTheHonestError)
{
    PipelinePanel panel;
    kl::PipelineResult r = fixture();
    panel.setResult(r);
    // A result recorded before budgets says so rather than showing nothing.
    EXPECT_TRUE(panel.budgets().contains(QStringLiteral("not recorded"))) << panel.budgets().toStdString();
    kl::PipelineOutputBudget b;
    b.output = "out";
    b.floor = { 0.0039, 0.0156 };
    b.fp32Chain = { 0.0086, 0.03, true };
    b.allBaseline = { 0.0085, 0.031, true };
    b.tolerance = { 0.0688, 0.248 };
    b.pipeline = { 0.2, 0.75, true };
    r.shapes[1].budgets = { b };
    panel.setResult(r);
    panel.selectShape(1);
    EXPECT_TRUE(panel.budgets().contains(QStringLiteral(
        "out: rel_l2 / max_abs 0.2 / 0.75 over 0.0688 / 0.248 (honest: fp32 chain 0.0086 / 0.03, all-baseline 0.0085 / "
        "0.031; floor 0.0039 / 0.0156)")))
        << panel.budgets().toStdString();
    panel.selectShape(0);
    EXPECT_TRUE(panel.budgets().contains(QStringLiteral("not recorded")));
}

TEST(PipelineView, AStageThatBreaksCaptureIsMarkedAndTheVerdictNamesIt)
{
    kl::PipelineResult r = fixture();
    for (auto& s : r.shapes) {
        s.stages[2].captured = false;
        s.stages[2].captureError = "operation not permitted when stream is capturing";
        s.stages[2].graph.reset();
        s.graph.reset();
        s.baselineGraph.reset();
    }
    kl::judgePipeline(r);
    PipelinePanel panel;
    panel.resize(900, 500);
    panel.setResult(r);
    EXPECT_TRUE(panel.verdict().startsWith(QStringLiteral("Rejected: pipeline.graph-capture-failed: stage act")))
        << panel.verdict().toStdString();
    EXPECT_EQ(cell(*panel.model(), 2, PipelineStageModel::CaptureColumn), "fails");
    EXPECT_EQ(panel.model()->data(panel.model()->index(2, PipelineStageModel::CaptureColumn), Qt::ToolTipRole),
        "operation not permitted when stream is capturing");
    EXPECT_TRUE(panel.graphCheck().contains(QStringLiteral("not captured")));
    EXPECT_TRUE(panel.summary().contains(QStringLiteral("eager, no graph")));
    panel.show();
    const QImage image = panel.strip()->grab().toImage();
    EXPECT_EQ(image.pixelColor(panel.strip()->stageRect(2).left() + 1, 2), QColor(0xc6, 0x28, 0x28));
}

TEST(PipelineView, ABadFileIsReportedByFieldAndKeepsWhatWasShown)
{
    PipelinePanel panel;
    ASSERT_TRUE(panel.loadFile(kFixture));
    QTemporaryDir dir;
    kl::Json j = kl::Json::parse(kl::readFile(kFixture.toStdString()));
    j["shapes"][0]["stages"][1]["graph"]["median_us"] = "fast";
    const QString bad = dir.filePath(QStringLiteral("bad.json"));
    std::ofstream(bad.toStdString()) << j.dump();
    EXPECT_FALSE(panel.loadFile(bad));
    EXPECT_TRUE(panel.error().contains(QStringLiteral("bad.json.shapes[0].stages[1].graph.median_us")))
        << panel.error().toStdString();
    EXPECT_EQ(panel.result().pipeline, "llama_mlp_decode");
    EXPECT_EQ(panel.model()->rowCount(), 4);
    EXPECT_FALSE(panel.loadFile(dir.filePath(QStringLiteral("missing.json"))));
    EXPECT_TRUE(panel.error().contains(QStringLiteral("missing.json")));
}

TEST(PipelineView, IsADockOfTheWorkbench)
{
    MainWindow w;
    auto* dock = w.findChild<QDockWidget*>(QStringLiteral("pipelineDock"));
    ASSERT_NE(dock, nullptr);
    EXPECT_EQ(dock->widget(), w.pipelinePanel());
    ASSERT_TRUE(w.pipelinePanel()->loadFile(kFixture)) << w.pipelinePanel()->error().toStdString();
    EXPECT_EQ(w.pipelinePanel()->model()->rowCount(), 4);
}
