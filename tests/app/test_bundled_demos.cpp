// The bundled recorded sessions on the start page: the rmsnorm one and, when the build has it, the MLA hypothesis
// one, each offered with a title and a line, each opening in the workbench with its traces; and the MLA demo's
// screenshots. The MLA session here is a fixture (tests/app/data/mla-demo-fixture, recorded with the worker's test
// double), pointed at through KL_DEMO_SESSION_MLA.
#include "app/candidate_panel.h"
#include "app/demo_session.h"
#include "app/main_window.h"
#include "app/models/trace_row_model.h"
#include "app/screenshot.h"
#include "app/session_controller.h"
#include "app/start_page.h"
#include "app/timeline_panel.h"
#include "wait_until.h"

#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QPushButton>
#include <QSet>
#include <QTemporaryDir>
#include <QTest>
#include <filesystem>
#include <gtest/gtest.h>

using namespace kl::app;

namespace {

using kl::test::waitUntil;

const char* kFixtureId = "fixture-mla-demo-test-double";

// A copy of the fixture (opening a session may tidy it; the source tree stays as committed), named by
// KL_DEMO_SESSION_MLA for the test's lifetime.
class BundledDemos : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_TRUE(m_tmp.isValid());
        m_mla = m_tmp.filePath(QStringLiteral("demo-session-mla"));
        std::filesystem::copy(KL_SOURCE_DIR "/tests/app/data/mla-demo-fixture", m_mla.toStdString(),
            std::filesystem::copy_options::recursive);
        qputenv("KL_DEMO_SESSION_MLA", m_mla.toLocal8Bit());
    }
    void TearDown() override { qunsetenv("KL_DEMO_SESSION_MLA"); }

    QTemporaryDir m_tmp;
    QString m_mla;
};

} // namespace

TEST_F(BundledDemos, TheStartPageOffersBothAndTheMlaOneOpensWithItsTraces)
{
    const auto demos = bundledDemos();
    ASSERT_FALSE(demos.empty());
    EXPECT_EQ(demos.back().key, QStringLiteral("mla"));
    EXPECT_EQ(QFileInfo(demos.back().dir).canonicalFilePath(), QFileInfo(m_mla).canonicalFilePath());
    EXPECT_TRUE(isBundledDemoSession(m_mla)) << "it opens read-only like the rmsnorm one";

    MainWindow w;
    w.show();
    w.showStartPage();
    StartPage* page = w.startPage();
    const bool rmsnorm = !demoSessionDir().isEmpty();
    EXPECT_EQ(page->demoKeys(),
        rmsnorm ? (QStringList { QStringLiteral("rmsnorm"), QStringLiteral("mla") })
                : QStringList { QStringLiteral("mla") });
    if (rmsnorm) {
        ASSERT_NE(page->findChild<QPushButton*>(QStringLiteral("openDemoButton")), nullptr);
    }
    auto* button = page->findChild<QPushButton*>(QStringLiteral("openDemoButton-mla"));
    ASSERT_NE(button, nullptr);
    EXPECT_TRUE(button->text().contains(QStringLiteral("MLA"))) << button->text().toStdString();
    auto* line = page->findChild<QLabel*>(QStringLiteral("demoSummary-mla"));
    ASSERT_NE(line, nullptr);
    EXPECT_TRUE(line->text().contains(QStringLiteral("hypothesis"))) << line->text().toStdString();

    QTest::mouseClick(button, Qt::LeftButton);
    ASSERT_TRUE(waitUntil([&]() { return w.controller()->session() && !page->isVisible(); }));
    EXPECT_EQ(w.controller()->session()->id, kFixtureId);
    EXPECT_TRUE(w.controller()->info().replaying);
    // Both SOL traces, before (the template) and after (the best), one after the other in the timeline.
    ASSERT_TRUE(waitUntil([&]() { return w.timelinePanel()->rowModel()->traces().size() == 2; }))
        << w.timelinePanel()->rowModel()->traces().size();
    const auto& traces = w.timelinePanel()->rowModel()->traces();
    EXPECT_TRUE(traces[0].label.contains(QStringLiteral("1-before-template"))) << traces[0].label.toStdString();
    EXPECT_TRUE(traces[1].label.contains(QStringLiteral("2-after-best"))) << traces[1].label.toStdString();
}

TEST_F(BundledDemos, WithoutTheMlaRecordingTheStartPageOffersOnlyRmsnorm)
{
    qputenv("KL_DEMO_SESSION_MLA", m_tmp.filePath(QStringLiteral("nowhere")).toLocal8Bit());
    if (QFileInfo::exists(QStringLiteral(KL_SOURCE_DIR "/resources/demo-session-mla/journal.jsonl")))
        GTEST_SKIP() << "this tree has the recorded MLA session (resources/demo-session-mla)";
    EXPECT_TRUE(mlaDemoSessionDir().isEmpty());
    MainWindow w;
    w.show();
    w.showStartPage();
    EXPECT_EQ(w.startPage()->findChild<QPushButton*>(QStringLiteral("openDemoButton-mla")), nullptr);
    EXPECT_EQ(w.startPage()->demoKeys(),
        demoSessionDir().isEmpty() ? QStringList() : QStringList { QStringLiteral("rmsnorm") });
}

TEST_F(BundledDemos, TheMlaScreenshotSetShowsTheHypothesisCandidateAndBothTimelines)
{
    MainWindow w;
    ScreenshotOptions options;
    options.outputDir = m_tmp.filePath(QStringLiteral("shots"));
    options.set = ScreenshotSet::MlaDemo;
    options.width = 1280;
    options.height = 800;
    const ScreenshotResult r = renderScreenshots(w, options);
    ASSERT_TRUE(r.error.isEmpty()) << r.error.toStdString();
    QStringList names;
    for (const QString& f : r.files)
        names << QFileInfo(f).fileName();
    EXPECT_EQ(names,
        (QStringList { QStringLiteral("11-mla-hypothesis.png"), QStringLiteral("12-mla-diff.png"),
            QStringLiteral("13-mla-review.png"), QStringLiteral("16-mla-candidates.png"),
            QStringLiteral("14-mla-timeline.png"), QStringLiteral("15-mla-workbench-timeline.png") }));
    for (const QString& file : r.files) {
        const QImage img(file);
        ASSERT_FALSE(img.isNull()) << file.toStdString();
        QSet<QRgb> colours;
        for (int y = 0; y < img.height(); y += 7)
            for (int x = 0; x < img.width(); x += 7)
                colours.insert(img.pixel(x, y));
        EXPECT_GT(colours.size(), 8) << file.toStdString();
    }
    // The diff is the candidate proposed under the hypothesis (the LLM path's), not the tuner's best.
    ASSERT_TRUE(w.controller()->session());
    const kl::Candidate& shown
        = w.controller()->session()->tree.at(w.candidatePanel()->currentCandidate().toStdString());
    EXPECT_EQ(shown.author, kl::Author::Llm);
    EXPECT_FALSE(shown.hypothesisId.empty());
    EXPECT_EQ(w.timelinePanel()->rowModel()->traces().size(), 2u);
}

TEST_F(BundledDemos, TheMlaScreenshotSetRefusesASessionWithoutAHypothesisCandidate)
{
    MainWindow w;
    ScreenshotOptions options;
    options.outputDir = m_tmp.filePath(QStringLiteral("shots"));
    options.set = ScreenshotSet::MlaDemo;
    options.sessionDir = demoSessionDir();
    if (options.sessionDir.isEmpty())
        GTEST_SKIP() << "this build has no bundled rmsnorm session to try it on";
    const ScreenshotResult r = renderScreenshots(w, options);
    EXPECT_TRUE(r.error.contains(QStringLiteral("no candidate proposed under a hypothesis"))) << r.error.toStdString();
    EXPECT_TRUE(r.files.isEmpty());
}
