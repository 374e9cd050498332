// Regimes learned from where a session's per-shape winners change (issue 20): kloop session regimes.
#include "core/errors.h"
#include "core/json_io.h"
#include "core/regime_split.h"
#include "tests/support/temp_dir.h"

#include <fstream>
#include <gtest/gtest.h>
#include <random>

using namespace kl;

namespace {

// Softmax-like: rows R and columns C. Shape 0 is told apart by R alone, shape 2 by C alone.
Problem rowsAndColumns()
{
    return problemFromJson(Json::parse(R"JSON({
      "name": "rows", "dims": [{"name": "R", "min": 1, "max": 65536},
                               {"name": "C", "min": 32, "max": 131072, "multiple_of": 8}],
      "tensors": [{"name": "y", "dtype": "f16", "shape": ["R", "C"], "role": "output"},
                  {"name": "x", "dtype": "f16", "shape": ["R", "C"], "role": "input"}],
      "tuning_shapes": [{"dims": {"R": 16, "C": 65536}}, {"dims": {"R": 4096, "C": 65536}},
                        {"dims": {"R": 4096, "C": 4096}}, {"dims": {"R": 1024, "C": 131072}}],
      "verify_shapes": [{"dims": {"R": 1, "C": 32}}]})JSON"),
        "rows.json");
}

struct Recorded {
    std::vector<double> speedups; // one per tuning shape, in order
    Fidelity fidelity {};
    std::vector<VerdictReason> reasons {};
    CandidateStatus status = CandidateStatus::Rejected;
    bool wrongHeldOut = false;
    std::string gpu = "NVIDIA H200";
};

Session sessionOf(const Problem& p, const std::vector<Recorded>& recorded)
{
    Session s;
    s.id = "learn";
    s.problemName = p.name;
    s.device.name = "NVIDIA H200";
    for (const Recorded& r : recorded) {
        Candidate c;
        c.id = s.tree.nextId();
        c.status = r.status;
        c.fidelity = r.fidelity;
        Evaluation e;
        e.candidateId = c.id;
        e.verdict = r.status == CandidateStatus::Accepted ? Verdict::Accepted : Verdict::Rejected;
        e.reasons = r.reasons;
        e.fidelity = r.fidelity;
        e.measuredOn = { "local", r.gpu, "" };
        for (std::size_t i = 0; i < r.speedups.size(); ++i) {
            ShapeResult sr;
            sr.shape = p.withConstants(p.tuningShapes[i]);
            sr.correct = true;
            sr.timing = TimingStats {};
            sr.speedup = r.speedups[i];
            e.shapes.push_back(sr);
        }
        ShapeResult held;
        held.shape.dims = { { "R", 7 }, { "C", 1000 } };
        held.heldOut = true;
        held.correct = !r.wrongHeldOut;
        e.shapes.push_back(held);
        s.evaluations[c.id] = e;
        s.tree.add(c);
    }
    return s;
}

// c0001 wins short rows, c0002 long rows, c0003 the decode shape; c0002 is the best single configuration.
std::vector<Recorded> threeSpecialists()
{
    return { { { 1.0, 1.0, 2.0, 1.0 } }, { { 1.2, 1.6, 1.2, 1.6 }, {}, {}, CandidateStatus::Accepted },
        { { 2.0, 1.1, 1.1, 1.1 } } };
}

} // namespace

TEST(RegimeSplit, SplitsWherePerShapeWinnersChangeAndNamesEachRegimeByItsCondition)
{
    const Problem p = rowsAndColumns();
    const RegimeSplit split = learnRegimes(p, sessionOf(p, threeSpecialists()));
    EXPECT_EQ(split.gpu, "NVIDIA H200");
    EXPECT_EQ(split.configurations, 3);
    EXPECT_EQ(split.singleBest, "c0002");
    EXPECT_NEAR(split.singleObjective, std::pow(1.2 * 1.6 * 1.2 * 1.6, 0.25), 1e-9);
    ASSERT_EQ(split.regimes.size(), 3u);
    // R first: the cut between 16 and 1024 lies at their geometric middle, 128; then C between 4096 and 65536.
    EXPECT_EQ(split.regimes[0].condition, "R <= 128");
    EXPECT_EQ(split.regimes[0].name, "r_le_128");
    EXPECT_EQ(split.regimes[0].best, "c0003");
    EXPECT_NEAR(split.regimes[0].objective, 2.0, 1e-9);
    EXPECT_NEAR(split.regimes[0].singleObjective, 1.2, 1e-9);
    EXPECT_EQ(split.regimes[1].condition, "C <= 16384 && R > 128");
    EXPECT_EQ(split.regimes[1].name, "c_le_16384_r_gt_128");
    EXPECT_EQ(split.regimes[1].best, "c0001");
    ASSERT_EQ(split.regimes[1].shapes.size(), 1u);
    EXPECT_EQ(split.regimes[1].shapes[0].label(), "C=4096,R=4096");
    EXPECT_EQ(split.regimes[2].condition, "C > 16384 && R > 128");
    EXPECT_EQ(split.regimes[2].best, "c0002");
    EXPECT_NEAR(split.regimes[2].objective, 1.6, 1e-9);
    EXPECT_NEAR(split.objective, std::pow(2.0 * 1.6 * 2.0 * 1.6, 0.25), 1e-9);
    EXPECT_NEAR(split.startObjective, split.singleObjective, 1e-12); // no problem regimes: splitting starts whole
    EXPECT_EQ(regimesJson(split),
        R"([{"name":"r_le_128","when":"R <= 128"},{"name":"c_le_16384_r_gt_128","when":"C <= 16384 && R > 128"},)"
        R"({"name":"c_gt_16384_r_gt_128","when":"C > 16384 && R > 128"}])");

    // Two regimes at most: the first split only.
    const RegimeSplit two = learnRegimes(p, sessionOf(p, threeSpecialists()), { 2, 0.02 });
    ASSERT_EQ(two.regimes.size(), 2u);
    EXPECT_EQ(two.regimes[1].condition, "R > 128");
    EXPECT_EQ(two.regimes[1].best, "c0002");
}

// A problem with a fixed-size dim: every shape carries it, and a constant is never split on.
TEST(RegimeSplit, MatchesRecordedShapesThatCarryTheProblemsConstants)
{
    Json j = toJson(rowsAndColumns());
    j["constants"] = { { "D", 128 } };
    j["tensors"][0]["shape"] = { "R", "C", "D" };
    const Problem p = problemFromJson(j, "rows.json");
    ASSERT_EQ(p.tuningShapes[0].dims.at("D"), 128);
    const RegimeSplit split = learnRegimes(p, sessionOf(p, threeSpecialists()));
    EXPECT_EQ(split.configurations, 3);
    ASSERT_EQ(split.regimes.size(), 3u);
    EXPECT_EQ(split.regimes[1].condition, "C <= 16384 && R > 128");
}

// Splitting starts from the problem's own regimes (decode / prefill here) and refines them; a regime that no tuning
// shape lies in stays, without a best. --from-scratch ignores them.
TEST(RegimeSplit, RefinesTheProblemsOwnRegimes)
{
    Json j = toJson(rowsAndColumns());
    j["regimes"] = Json::parse(R"([{"name": "decode", "when": "R <= 256"}, {"name": "prefill", "when": "R > 256"}])");
    const Problem p = problemFromJson(j, "rows.json");
    const RegimeSplit split = learnRegimes(p, sessionOf(p, threeSpecialists()));
    EXPECT_EQ(split.cuts, 1);
    // decode alone already gives c0003 its 2x; the cut gives c0001 its 2x at short rows.
    EXPECT_NEAR(split.startObjective, std::pow(2.0 * 1.6 * 1.2 * 1.6, 0.25), 1e-9);
    EXPECT_NEAR(split.objective, std::pow(2.0 * 1.6 * 2.0 * 1.6, 0.25), 1e-9);
    ASSERT_EQ(split.regimes.size(), 3u);
    EXPECT_EQ(split.regimes[0].name, "decode");
    EXPECT_EQ(split.regimes[0].condition, "R <= 256");
    EXPECT_EQ(split.regimes[0].best, "c0003");
    EXPECT_EQ(split.regimes[1].name, "prefill_c_le_16384");
    EXPECT_EQ(split.regimes[1].condition, "R > 256 && C <= 16384");
    EXPECT_EQ(split.regimes[1].best, "c0001");
    EXPECT_EQ(split.regimes[2].condition, "R > 256 && C > 16384");
    Json withLearned = j;
    withLearned["regimes"] = Json::parse(regimesJson(split));
    EXPECT_EQ(problemFromJson(withLearned, "rows.json").regimes.size(), 3u);

    // A condition with || is kept whole; a regime nothing times keeps no best.
    j["regimes"] = Json::parse(R"([{"name": "tiny", "when": "R <= 2"}, {"name": "wide", "when": "R > 2 && C > 100000"},
        {"name": "rest", "when": "R > 2 && C <= 100000 || R > 2 && C > 100000 && 0"}])");
    const Problem q = problemFromJson(j, "rows.json");
    const RegimeSplit three = learnRegimes(q, sessionOf(q, threeSpecialists()));
    ASSERT_EQ(three.regimes.size(), 4u);
    EXPECT_EQ(three.regimes[0].name, "tiny");
    EXPECT_TRUE(three.regimes[0].shapes.empty());
    EXPECT_TRUE(three.regimes[0].best.empty());
    EXPECT_EQ(three.regimes[1].best, "c0002");
    EXPECT_EQ(three.regimes[2].name, "rest_c_le_16384");
    EXPECT_EQ(three.regimes[2].condition, "(R > 2 && C <= 100000 || R > 2 && C > 100000 && 0) && C <= 16384");
    EXPECT_EQ(three.regimes[2].best, "c0001");
    EXPECT_EQ(three.regimes[3].best, "c0003");

    EXPECT_EQ(learnRegimes(p, sessionOf(p, threeSpecialists()), { 4, 0.02, false }).regimes[0].condition, "R <= 128");
}

TEST(RegimeSplit, TheLearnedRegimesPartitionTheWholeRangeAndLoadAsProblemJson)
{
    const Problem p = rowsAndColumns();
    const RegimeSplit split = learnRegimes(p, sessionOf(p, threeSpecialists()));
    Json j = toJson(p);
    j["regimes"] = Json::parse(regimesJson(split));
    const Problem withRegimes = problemFromJson(j, "rows.json"); // validates the partition at every declared shape
    ASSERT_EQ(withRegimes.regimes.size(), 3u);
    for (std::size_t i = 0; i < split.regimes.size(); ++i)
        for (const Shape& s : split.regimes[i].shapes)
            EXPECT_EQ(withRegimes.regimesOf(s), std::vector<std::size_t> { i }) << s.label();
    std::mt19937 rng(7);
    std::vector<Shape> anywhere;
    for (int k = 0; k < 2000; ++k) {
        Shape s;
        s.dims = { { "R", std::uniform_int_distribution<std::int64_t>(1, 65536)(rng) },
            { "C", 8 * std::uniform_int_distribution<std::int64_t>(4, 16384)(rng) } };
        anywhere.push_back(s);
    }
    EXPECT_EQ(regimePartitionError(withRegimes, anywhere, "drawn shape"), "");
}

TEST(RegimeSplit, KeepsOneRegimeWhenNoSplitPaysItsMinimumGain)
{
    const Problem p = rowsAndColumns();
    const std::vector<Recorded> alike = { { { 1.5, 1.5, 1.5, 1.5 } }, { { 1.49, 1.52, 1.5, 1.5 } } };
    const RegimeSplit split = learnRegimes(p, sessionOf(p, alike));
    ASSERT_EQ(split.regimes.size(), 1u);
    EXPECT_EQ(split.regimes[0].name, "all");
    EXPECT_EQ(split.regimes[0].condition, "1");
    EXPECT_EQ(split.regimes[0].shapes.size(), 4u);
    EXPECT_EQ(regimesJson(split), "[]");
    // The same specialists, but a gain of 50% is asked for: no split of them gives that.
    EXPECT_EQ(learnRegimes(p, sessionOf(p, threeSpecialists()), { 3, 0.5 }).regimes.size(), 1u);
}

TEST(RegimeSplit, LearnsOnlyFromTrustedFullMeasurementsOfOneGpuModel)
{
    const Problem p = rowsAndColumns();
    std::vector<Recorded> recorded = threeSpecialists();
    // Each would win everything if it counted.
    recorded.push_back({ { 9, 9, 9, 9 }, Fidelity { 5, 1 } }); // a screen: a ranking, not a measurement
    recorded.push_back(
        { { 9, 9, 9, 9 }, {}, { { "physics.above-roofline", "faster than the copy bound", 0, false } } });
    recorded.push_back({ { 9, 9, 9, 9 }, {}, {}, CandidateStatus::Rejected, true }); // wrong on a held-out shape
    recorded.push_back({ { 9, 9, 9, 9 }, {}, {}, CandidateStatus::Rejected, false, "NVIDIA H100 80GB HBM3" });
    // Slower than the best is the loop's own verdict: still a measurement to learn from.
    recorded.push_back({ { 1.0, 1.0, 2.5, 1.0 }, {}, { { "decide.slower", "slower than the best", 0, true } } });
    const RegimeSplit split = learnRegimes(p, sessionOf(p, recorded));
    EXPECT_EQ(split.configurations, 4);
    EXPECT_EQ(split.singleBest, "c0002");
    ASSERT_EQ(split.regimes.size(), 3u);
    // Its 2.5x at short rows now pays more than the decode shape's winner: C is split first.
    EXPECT_EQ(split.regimes[0].condition, "C <= 16384");
    EXPECT_EQ(split.regimes[0].best, "c0008");

    // A flag the engineer accepted counts.
    recorded[4].status = CandidateStatus::Accepted;
    EXPECT_EQ(learnRegimes(p, sessionOf(p, recorded)).singleBest, "c0005");
}

TEST(RegimeSplit, RefusesASessionWithoutATrustedTimedConfiguration)
{
    const Problem p = rowsAndColumns();
    std::vector<Recorded> untrusted = { { { 2, 2, 2, 2 }, Fidelity { 5, 1 } },
        { { 2, 2, 2, 2 }, {}, { { "physics.above-roofline", "faster than the copy bound", 0, false } } } };
    try {
        learnRegimes(p, sessionOf(p, untrusted));
        FAIL() << "learned from nothing";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("session learn: no configuration of rows on NVIDIA H200 is correct and "
                                             "timed against the baseline"),
            std::string::npos)
            << e.what();
    }
}

// A session run on other shapes than the problem's (kloop run --shapes) learns from the shapes most of its
// configurations timed; one that timed more counts on those, one that timed fewer (no speedup at one) is left out.
TEST(RegimeSplit, LearnsFromTheShapesTheSessionTimed)
{
    Json j = toJson(rowsAndColumns());
    j["tuning_shapes"] = Json::parse(R"([{"dims": {"R": 8, "C": 1024}}, {"dims": {"R": 8192, "C": 1024}},
        {"dims": {"R": 64, "C": 64}}])");
    const Problem timedOn = problemFromJson(j, "rows.json");
    Session s = sessionOf(
        timedOn, { { { 2.0, 1.0, 0.0 } }, { { 1.0, 2.0, 0.0 } }, { { 1.0, 1.0, 9.0 } }, { { 9.0, 0.0, 0.0 } } });
    const RegimeSplit split = learnRegimes(rowsAndColumns(), s); // the problem's own tuning shapes: none of these
    EXPECT_EQ(split.configurations, 3);
    EXPECT_EQ(split.shapes, 2);
    ASSERT_EQ(split.regimes.size(), 2u);
    EXPECT_EQ(split.regimes[0].condition, "R <= 256");
    EXPECT_EQ(split.regimes[0].best, "c0001");
    EXPECT_EQ(split.regimes[1].best, "c0002");
    ASSERT_EQ(split.regimes[1].shapes.size(), 1u);
    EXPECT_EQ(split.regimes[1].shapes[0].label(), "C=1024,R=8192");
}

// --write-problem: the session's problem folder copied with the learned regimes in its problem.json, every other
// field and file as it was; a folder with something in it is refused, and a split of one drops "regimes".
TEST(RegimeSplit, WritesACopyOfTheProblemFolderWithTheLearnedRegimes)
{
    namespace fs = std::filesystem;
    const fs::path softmax = fs::path(KL_SOURCE_DIR) / "kernels" / "problems" / "softmax";
    const Problem original = loadProblem(softmax.string());
    RegimeSplit split;
    for (const auto& [name, when] :
        { std::pair { "r_le_256", "R <= 256" }, std::pair { "c_le_16384_r_gt_256", "C <= 16384 && R > 256" },
            std::pair { "c_gt_16384_r_gt_256", "C > 16384 && R > 256" } })
        split.regimes.push_back({ name, when, {}, "c0001", 1, 1 });
    kl::test::TempDir scratch;
    const fs::path copy = scratch.path() / "softmax-regimes";
    const Problem written = writeProblemWithRegimes(softmax, copy, split);
    ASSERT_EQ(written.regimes.size(), 3u);
    EXPECT_EQ(written.regimes[1].name, "c_le_16384_r_gt_256");
    EXPECT_EQ(written.regimes[1].condition.text(), "C <= 16384 && R > 256");
    for (const auto& entry : fs::directory_iterator(softmax))
        EXPECT_TRUE(fs::exists(copy / entry.path().filename())) << entry.path();
    std::ifstream a(softmax / "template.cu"), b(copy / "template.cu");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(a), {}), std::string(std::istreambuf_iterator<char>(b), {}));
    Json before = toJson(original), after = toJson(written);
    before.erase("regimes");
    after.erase("regimes");
    EXPECT_EQ(before, after);

    try {
        writeProblemWithRegimes(softmax, copy, split);
        FAIL() << "wrote over a folder with a problem in it";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("softmax-regimes: exists and is not empty"), std::string::npos)
            << e.what();
    }
    split.regimes.resize(1);
    EXPECT_TRUE(writeProblemWithRegimes(softmax, scratch.path() / "one", split).regimes.empty());
}
