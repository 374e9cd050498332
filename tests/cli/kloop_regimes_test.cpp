// Shape regimes end to end (issue 20), kloop as a process against the worker's test double: `kloop run` on rmsnorm
// (decode T <= 256, prefill otherwise) keeps a best per regime, draws held-out shapes inside each regime and times
// some of them against the baseline, `kloop session show` prints the regimes with their winners, and `kloop export`
// writes the regime dispatcher.
#include "core/current_best.h"
#include "core/session_store.h"
#include "tests/support/kloop_process.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace kl::clitest;

namespace {

struct KloopRegimes : ::testing::Test {
    fs::path scratch;

    void SetUp() override
    {
        scratch = fs::temp_directory_path()
            / ("kl_kloop_regimes_" + std::to_string(::getpid()) + "_"
                + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(scratch);
        fs::create_directories(scratch / "home");
    }
    void TearDown() override
    {
        if (!HasFailure() && !std::getenv("KL_TEST_KEEP"))
            fs::remove_all(scratch);
    }
    ProcessResult kloop(const std::vector<std::string>& args) const
    {
        return runKloop(args,
            { { "HOME", (scratch / "home").string() }, { "XDG_CACHE_HOME", (scratch / "cache").string() },
                { "XDG_CONFIG_HOME", (scratch / "config").string() }, { "KL_PROBLEMS_DIR", "" },
                { "KL_WORKER", KL_FAKE_WORKER_PATH } },
            scratch);
    }
};

} // namespace

TEST_F(KloopRegimes, RunKeepsABestPerRegimeShowsThemAndExportsTheDispatcher)
{
    const fs::path dir = scratch / "s";
    const ProcessResult run = kloop({ "run", "--problem", "rmsnorm", "--agent", "tuner:random", "--budget", "6",
        "--session", dir.string(), "--seed", "7" });
    ASSERT_EQ(run.exitCode, 0) << run.out << run.err;
    const kl::Session s = kl::SessionStore::load(dir);
    EXPECT_EQ(s.settings.regimes, "problem");

    // Every measured evaluation is judged per regime, on held-out shapes drawn inside each regime, some of them timed.
    int measured = 0;
    for (const auto& [id, e] : s.evaluations) {
        if (e.shapes.empty() || e.verdict == kl::Verdict::CompileFailed)
            continue;
        ++measured;
        ASSERT_EQ(e.regimes.size(), 2u) << id;
        EXPECT_EQ(e.regimes[0].name, "decode");
        EXPECT_EQ(e.regimes[1].condition, "T > 256");
        int heldOutDecode = 0, heldOutPrefill = 0, timedDecode = 0, timedPrefill = 0;
        for (const kl::ShapeResult& r : e.shapes) {
            if (!r.heldOut)
                continue;
            const bool decode = r.shape.dims.at("T") <= 256;
            (decode ? heldOutDecode : heldOutPrefill) += 1;
            if (r.timing && r.speedup > 0)
                (decode ? timedDecode : timedPrefill) += 1;
        }
        EXPECT_GE(heldOutDecode, 4) << id;
        EXPECT_GE(heldOutPrefill, 4) << id;
        EXPECT_EQ(timedDecode, 2) << id;
        EXPECT_EQ(timedPrefill, 2) << id;
        EXPECT_GT(e.regimes[0].verifiedShapes, heldOutDecode) << id; // the regime's visible shapes too
    }
    EXPECT_GT(measured, 2);
    const auto winners = kl::regimeWinners(s);
    ASSERT_EQ(winners.size(), 2u);
    ASSERT_TRUE(winners[0].winner);
    ASSERT_TRUE(winners[1].winner);
    EXPECT_GT(winners[1].result.objective, 1.0);

    const ProcessResult show = kloop({ "session", "show", dir.string() });
    ASSERT_EQ(show.exitCode, 0) << show.err;
    EXPECT_NE(show.out.find("regimes (a best per regime"), std::string::npos) << show.out;
    EXPECT_NE(show.out.find("  decode       T <= 256                 " + *winners[0].winner), std::string::npos)
        << show.out;
    const ProcessResult showJson = kloop({ "session", "show", dir.string(), "--json" });
    ASSERT_EQ(showJson.exitCode, 0) << showJson.err;
    const auto j = nlohmann::json::parse(showJson.out);
    ASSERT_EQ(j.at("regimes").size(), 2u);
    EXPECT_EQ(j.at("regimes")[1].at("winner"), *winners[1].winner);
    EXPECT_EQ(j.at("regimes")[1].at("verified_shapes"), winners[1].result.verifiedShapes);

    const fs::path out = scratch / "bundle";
    const ProcessResult exported = kloop({ "export", dir.string(), "--out", out.string(), "--json" });
    ASSERT_EQ(exported.exitCode, 0) << exported.out << exported.err;
    const auto ej = nlohmann::json::parse(exported.out);
    ASSERT_EQ(ej.at("regimes").size(), 2u);
    EXPECT_EQ(ej.at("regimes")[0].at("candidate"), *winners[0].winner);
    EXPECT_TRUE(fs::exists(out / "include" / "kl_rmsnorm_regimes.h"));
    EXPECT_TRUE(fs::exists(out / "decode" / "include" / "kl_rmsnorm_decode.h"));
    EXPECT_TRUE(fs::exists(out / "prefill" / "src" / "kl_rmsnorm_prefill_dispatch.c"));
    // --candidate still exports the one candidate as a plain bundle.
    const ProcessResult one
        = kloop({ "export", dir.string(), "--out", (scratch / "one").string(), "--candidate", *winners[1].winner });
    ASSERT_EQ(one.exitCode, 0) << one.out << one.err;
    EXPECT_TRUE(fs::exists(scratch / "one" / "include" / "kl_rmsnorm.h"));
}

TEST_F(KloopRegimes, TheSingleSettingRunsOneObjective)
{
    const fs::path dir = scratch / "single";
    ASSERT_EQ(kloop({ "session", "new", dir.string(), "--problem", "rmsnorm", "--agent", "tuner:random", "--regimes",
                        "single" })
                  .exitCode,
        0);
    const ProcessResult run = kloop({ "run", "--resume", dir.string(), "--agent", "tuner:random", "--budget", "3" });
    ASSERT_EQ(run.exitCode, 0) << run.out << run.err;
    const kl::Session s = kl::SessionStore::load(dir);
    EXPECT_EQ(s.settings.regimes, "single");
    for (const auto& [id, e] : s.evaluations)
        EXPECT_TRUE(e.regimes.empty()) << id;
    EXPECT_TRUE(kl::regimeWinners(s).empty());
}
