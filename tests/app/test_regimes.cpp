// The Regimes table (issue 20): each regime's winner with its speedup interval and verified shapes, under
// QAbstractItemModelTester, following snapshots; and the workbench shows it in its Regimes dock.
#include "app/main_window.h"
#include "app/models/regime_table_model.h"
#include "app/regimes_panel.h"
#include "core/json_io.h"

#include <QAbstractItemModelTester>
#include <QDockWidget>
#include <QLabel>
#include <QSignalSpy>
#include <QTableView>
#include <gtest/gtest.h>

using namespace kl::app;

namespace {

kl::Candidate candidate(const std::string& id, kl::CandidateStatus status)
{
    kl::Candidate c;
    c.id = id;
    c.source = "// " + id;
    c.status = status;
    return c;
}

kl::Evaluation evaluation(const std::string& id, double decode, bool decodeWon, double prefill, bool prefillWon)
{
    kl::Evaluation e;
    e.candidateId = id;
    e.verdict = kl::Verdict::Accepted;
    e.objective = 1.2;
    e.regimes = { { "decode", "T <= 256", decode, decode * 0.98, decode * 1.02, 2, 5, decodeWon },
        { "prefill", "T > 256", prefill, prefill * 0.99, prefill * 1.01, 3, 6, prefillWon } };
    return e;
}

// c0001 won both regimes, c0002 then won decode; c0003 (rejected) won nothing.
SessionSnapshot session(bool withSecondWinner)
{
    kl::Session s;
    s.id = "regimes";
    s.tree.add(candidate("c0001", kl::CandidateStatus::Accepted));
    s.evaluations["c0001"] = evaluation("c0001", 1.3, true, 1.4, true);
    if (withSecondWinner) {
        kl::Candidate c = candidate("c0002", kl::CandidateStatus::Accepted);
        c.parentId = "c0001";
        s.tree.add(c);
        s.evaluations["c0002"] = evaluation("c0002", 1.9, true, 1.1, false);
    }
    kl::Candidate r = candidate("c0003", kl::CandidateStatus::Rejected);
    r.parentId = "c0001";
    s.tree.add(r);
    s.evaluations["c0003"] = evaluation("c0003", 2.5, false, 2.5, false);
    return std::make_shared<const kl::Session>(std::move(s));
}

QString cell(const RegimeTableModel& m, int row, int column, int role = Qt::DisplayRole)
{
    return m.data(m.index(row, column), role).toString();
}

} // namespace

TEST(RegimeTableModel, ListsEachRegimesWinnerWithItsIntervalAndVerifiedShapes)
{
    RegimeTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setSession(session(false));
    ASSERT_EQ(model.rowCount(), 2);
    EXPECT_EQ(model.columnCount(), RegimeTableModel::ColumnCount);
    EXPECT_EQ(cell(model, 0, RegimeTableModel::RegimeColumn), QStringLiteral("decode"));
    EXPECT_EQ(cell(model, 0, RegimeTableModel::ConditionColumn), QStringLiteral("T <= 256"));
    EXPECT_EQ(cell(model, 0, RegimeTableModel::WinnerColumn), QStringLiteral("c0001"));
    EXPECT_EQ(cell(model, 0, RegimeTableModel::SpeedupColumn), QStringLiteral("1.300x [1.274, 1.326]"));
    EXPECT_EQ(cell(model, 1, RegimeTableModel::VerifiedColumn), QStringLiteral("6"));
    EXPECT_EQ(
        cell(model, 1, RegimeTableModel::WinnerColumn, RegimeTableModel::CandidateIdRole), QStringLiteral("c0001"));
    EXPECT_EQ(model.headerData(RegimeTableModel::SpeedupColumn, Qt::Horizontal).toString(),
        QStringLiteral("Speedup (95% CI)"));

    // A new decode winner changes its row in place; the prefill row keeps its winner.
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    model.setSession(session(true));
    EXPECT_EQ(reset.count(), 0);
    ASSERT_EQ(changed.count(), 1);
    EXPECT_EQ(changed.front().at(0).toModelIndex().row(), 0);
    EXPECT_EQ(cell(model, 0, RegimeTableModel::WinnerColumn), QStringLiteral("c0002"));
    EXPECT_EQ(cell(model, 0, RegimeTableModel::SpeedupColumn), QStringLiteral("1.900x [1.862, 1.938]"));
    EXPECT_EQ(cell(model, 1, RegimeTableModel::WinnerColumn), QStringLiteral("c0001"));

    // A session of one regime (or none open) has no rows.
    model.setSession(nullptr);
    EXPECT_EQ(model.rowCount(), 0);
}

TEST(RegimeTableModel, ARegimeWithoutWinnerSaysTheFallbackServesIt)
{
    kl::Session s;
    s.tree.add(candidate("c0001", kl::CandidateStatus::Rejected));
    s.evaluations["c0001"] = evaluation("c0001", 0.9, false, 0.8, false);
    RegimeTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setSession(std::make_shared<const kl::Session>(std::move(s)));
    ASSERT_EQ(model.rowCount(), 2);
    EXPECT_EQ(cell(model, 0, RegimeTableModel::WinnerColumn), QStringLiteral("none: the fallback"));
    EXPECT_EQ(cell(model, 0, RegimeTableModel::SpeedupColumn), QString());
    EXPECT_EQ(cell(model, 0, RegimeTableModel::WinnerColumn, RegimeTableModel::CandidateIdRole), QString());
}

TEST(RegimeTableModel, TheWorkbenchHasARegimesDockWithTheTable)
{
    MainWindow w;
    auto* dock = w.findChild<QDockWidget*>(QStringLiteral("regimesDock"));
    ASSERT_NE(dock, nullptr);
    auto* view = w.findChild<QTableView*>(QStringLiteral("regimeTable"));
    ASSERT_NE(view, nullptr);
    EXPECT_NE(qobject_cast<RegimeTableModel*>(view->model()), nullptr);
}

namespace {

kl::Problem tokensAndHidden()
{
    return kl::problemFromJson(kl::Json::parse(R"JSON({
      "name": "rms", "dims": [{"name": "T", "min": 1, "max": 65536}, {"name": "H", "min": 256, "max": 16384}],
      "tensors": [{"name": "y", "dtype": "f32", "shape": ["T", "H"], "role": "output"},
                  {"name": "x", "dtype": "f32", "shape": ["T", "H"], "role": "input"}],
      "tuning_shapes": [{"dims": {"T": 16, "H": 4096}}, {"dims": {"T": 4096, "H": 4096}}],
      "verify_shapes": [{"dims": {"T": 1, "H": 256}}]})JSON"),
        "rms.json");
}

// One configuration per entry, with its speedups at the tuning shapes in order.
SessionSnapshot timedAtEveryShape(const kl::Problem& p, const std::vector<std::vector<double>>& speedups)
{
    kl::Session s;
    s.id = "learn";
    s.device.name = "NVIDIA H200";
    for (const std::vector<double>& atShapes : speedups) {
        kl::Candidate c = candidate(s.tree.nextId(), kl::CandidateStatus::Rejected);
        kl::Evaluation e;
        e.candidateId = c.id;
        for (const double x : atShapes) {
            kl::ShapeResult r;
            r.shape = p.tuningShapes[e.shapes.size()];
            r.correct = true;
            r.speedup = x;
            e.shapes.push_back(r);
        }
        s.evaluations[c.id] = e;
        s.tree.add(c);
    }
    return std::make_shared<const kl::Session>(std::move(s));
}

} // namespace

TEST(RegimesPanel, SaysWhereThePerShapeWinnersChangeUnderTheTable)
{
    const kl::Problem p = tokensAndHidden();
    RegimesPanel panel;
    auto* line = panel.findChild<QLabel*>(QStringLiteral("regimeSuggestion"));
    ASSERT_NE(line, nullptr);
    panel.setSession(timedAtEveryShape(p, { { 2.0, 1.0 }, { 1.0, 1.5 } }));
    EXPECT_TRUE(panel.suggestion().isEmpty()) << "no problem, so no shapes to split";

    panel.setProblem(p);
    EXPECT_EQ(panel.suggestion().toStdString(),
        std::string("Per-shape winners change: a best per learned regime gives 1.225x the single best (c0001). "
                    "t_le_256 (T <= 256): c0001 at 2.000x; t_gt_256 (T > 256): c0002 at 1.500x. "
                    "`kloop session regimes` prints them as problem.json \"regimes\"."));
    EXPECT_FALSE(line->isHidden());

    panel.setSession(timedAtEveryShape(p, { { 2.0, 1.6 }, { 1.0, 1.5 } }));
    EXPECT_EQ(panel.suggestion().toStdString(),
        std::string("Per-shape winners agree across 2 configurations: one configuration serves the tuning shapes "
                    "(c0001, 1.789x)."));

    // Inside a problem's own regimes, winners that agree leave them standing.
    kl::Json j = kl::toJson(p);
    j["regimes"]
        = kl::Json::parse(R"([{"name": "decode", "when": "T <= 256"}, {"name": "prefill", "when": "T > 256"}])");
    const kl::Problem withRegimes = kl::problemFromJson(j, "rms.json");
    panel.setProblem(withRegimes);
    panel.setSession(timedAtEveryShape(withRegimes, { { 2.0, 1.6 }, { 1.0, 1.5 } }));
    EXPECT_EQ(panel.suggestion().toStdString(),
        "No split inside the problem's regimes raises the geometric mean over 2 configurations by 2%: they stand.");

    // A cut inside them: the gain is stated over the single best and over the problem's regimes.
    j["tuning_shapes"].push_back({ { "dims", { { "T", 4096 }, { "H", 16384 } } } });
    const kl::Problem three = kl::problemFromJson(j, "rms.json");
    panel.setProblem(three);
    panel.setSession(timedAtEveryShape(three, { { 2.0, 1.0, 2.0 }, { 1.0, 2.0, 1.0 } }));
    EXPECT_EQ(panel.suggestion().toStdString(),
        "Per-shape winners change: a best per learned regime gives 1.260x the single best (c0001) and 1.260x the "
        "problem's regimes. decode (T <= 256): c0001 at 2.000x; prefill_h_le_8192 (T > 256 && H <= 8192): c0002 at "
        "2.000x; prefill_h_gt_8192 (T > 256 && H > 8192): c0001 at 2.000x. `kloop session regimes` prints them as "
        "problem.json \"regimes\".");

    // One configuration timed (at one shape): nothing to compare yet. None: no line.
    panel.setProblem(p);
    panel.setSession(timedAtEveryShape(p, { { 2.0, 0.0 } }));
    EXPECT_EQ(
        panel.suggestion().toStdString(), "One configuration is timed so far (c0001, 2.000x): nothing to compare.");
    panel.setSession(timedAtEveryShape(p, {}));
    EXPECT_TRUE(panel.suggestion().isEmpty());
    EXPECT_TRUE(line->isHidden());
}

TEST(RegimesPanel, AClickOnARegimesWinnerActivatesIt)
{
    RegimesPanel panel;
    QSignalSpy activated(&panel, &RegimesPanel::candidateActivated);
    panel.setSession(session(true));
    emit panel.view()->clicked(panel.model()->index(0, RegimeTableModel::WinnerColumn));
    ASSERT_EQ(activated.count(), 1);
    EXPECT_EQ(activated.front().at(0).toString(), QStringLiteral("c0002"));
}
