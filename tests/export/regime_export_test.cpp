// The regime dispatcher (issue 20): a session with a best candidate per shape regime exports one entry per regime
// (that regime's winner, inside the boxes of its regime where it was measured faster) and the fallback everywhere
// else. The plan's table is checked here, and the generated C dispatcher is compiled and run against it.
#include "export_fixture.h"
#include "kernels/export/regime_export.h"
#include "tests/support/text_file.h"

#include <cstdlib>
#include <gtest/gtest.h>

namespace kl {
namespace {

    namespace fs = std::filesystem;
    using namespace kl::exporter;
    using namespace kl::test;

    Shape shapeOf(std::int64_t t, std::int64_t h)
    {
        Shape s;
        s.dims = { { "T", t }, { "H", h } };
        return s;
    }

    int runCommand(const std::string& cmd, std::string* output)
    {
        const fs::path log = kl::test::freshDir("regime-cmd");
        const int rc = std::system((cmd + " > " + log.string() + " 2>&1").c_str());
        *output = kl::test::readTextFile(log);
        fs::remove(log);
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    }

    TEST(RegimeExport, OneEntryPerRegimeWithItsWinnersBoxesInsideTheRegime)
    {
        RegimeSession r;
        buildRegimeSession(r);
        const Session s = SessionStore::load(r.built.dir);
        const RegimeExportPlan plan = planRegimeExport(s, r.problem);
        EXPECT_TRUE(plan.refusals.empty()) << plan.refusals.front().message;
        ASSERT_EQ(plan.entries.size(), 2u);
        EXPECT_EQ(plan.prefix, "kl_rmsnorm_fx");
        EXPECT_EQ(plan.entries[0].candidateId, r.decodeWinner);
        EXPECT_EQ(plan.entries[1].candidateId, r.prefillWinner);
        EXPECT_EQ(plan.entries[0].plan.prefix, "kl_rmsnorm_fx_decode");
        EXPECT_EQ(plan.entries[1].plan.regime, "prefill");
        for (const auto& reg : plan.entries[0].plan.dispatch.candidateRegions)
            EXPECT_LE(reg.ranges[0].hi, 256) << reg.label(plan.dims);
        for (const auto& reg : plan.entries[1].plan.dispatch.candidateRegions)
            EXPECT_GT(reg.ranges[0].lo, 256) << reg.label(plan.dims);
        ASSERT_FALSE(plan.entries[0].plan.dispatch.candidateRegions.empty());
        ASSERT_FALSE(plan.entries[1].plan.dispatch.candidateRegions.empty());
    }

    TEST(RegimeExport, TheDispatchTableSendsEachShapeToItsRegimesWinnerOrTheFallback)
    {
        RegimeSession r;
        buildRegimeSession(r);
        const RegimeExportPlan plan = planRegimeExport(SessionStore::load(r.built.dir), r.problem);
        // Where the decode winner was measured faster: the decode winner (entry 0).
        EXPECT_EQ(plan.select(r.problem, shapeOf(1, 1024)), 0); // the prefill winner lost here
        EXPECT_EQ(plan.select(r.problem, shapeOf(16, 4096)), 0);
        EXPECT_EQ(plan.select(r.problem, shapeOf(40, 2048)), 0); // a held-out shape, timed inside the regime
        // Where the prefill winner was: entry 1, though the decode winner's box would not reach.
        EXPECT_EQ(plan.select(r.problem, shapeOf(4096, 4096)), 1);
        EXPECT_EQ(plan.select(r.problem, shapeOf(300, 1024)), 1);
        EXPECT_EQ(plan.select(r.problem, shapeOf(65536, 16384)), 1); // the decode winner lost here
        // In decode, where its winner lost: the fallback, not the other regime's winner.
        EXPECT_EQ(plan.select(r.problem, shapeOf(256, 16384)), -1);
        // Outside the problem's validity range: the fallback's business (it refuses it).
        EXPECT_EQ(plan.select(r.problem, shapeOf(16, 1023)), -1);
    }

    TEST(RegimeExport, ARegimeWithoutWinnerGoesToTheFallback)
    {
        RegimeSession r;
        buildRegimeSession(r, false);
        const RegimeExportPlan plan = planRegimeExport(SessionStore::load(r.built.dir), r.problem);
        ASSERT_EQ(plan.entries.size(), 2u);
        EXPECT_FALSE(plan.entries[1].candidateId);
        EXPECT_EQ(plan.select(r.problem, shapeOf(4096, 4096)), -1);
        EXPECT_EQ(plan.select(r.problem, shapeOf(16, 4096)), 0);
        bool warned = false;
        for (const auto& w : plan.warnings)
            warned |= w == "regime prefill has no winner: its shapes go to the fallback";
        EXPECT_TRUE(warned);
        const auto files = generateRegimeExport(SessionStore::load(r.built.dir), r.problem, plan, {});
        EXPECT_FALSE(files.count("prefill/CMakeLists.txt"));
        // The run entry point sends prefill to the decode bundle's fallback.
        EXPECT_NE(files.at("src/kl_rmsnorm_fx_regimes_run.c").find("kl_rmsnorm_fx_decode_run_fallback(&d"),
            std::string::npos);
    }

    // Regimes may overlap; the first whose condition holds takes a shape, in the plan, in the generated _regimes_of
    // and so in the expectations its dispatch test is generated with.
    TEST(RegimeExport, WhereRegimesOverlapTheFirstTakesTheShapeEverywhere)
    {
        RegimeSession r;
        buildRegimeSession(r);
        r.problem.regimes[1].condition = Expr::parse("T >= 256");
        const Session s = SessionStore::load(r.built.dir);
        const RegimeExportPlan plan = planRegimeExport(s, r.problem);
        ASSERT_EQ(plan.entries.size(), 2u);
        EXPECT_EQ(plan.select(r.problem, shapeOf(256, 16384)), -1); // decode's, where the decode winner lost
        const auto files = generateRegimeExport(s, r.problem, plan, {});
        const std::string table = files.at("test/regimes_dispatch_test.c");
        EXPECT_NE(table.find("}, 0, -1}, /* H=16384,T=256 */"), std::string::npos) << table;
        EXPECT_NE(files.at("src/kl_rmsnorm_fx_regimes.c").find("T >= 256"), std::string::npos);
    }

    TEST(RegimeExport, RefusesWithoutRegimesOrWinners)
    {
        RegimeSession r;
        buildRegimeSession(r);
        const Session s = SessionStore::load(r.built.dir);
        EXPECT_THROW(planRegimeExport(s, r.built.problem), InputError); // the fixture as shipped has no regimes
        BuiltSession plain = buildSession("rmsnorm_fx", decodeSpecialist());
        try {
            planRegimeExport(SessionStore::load(plain.dir), r.problem);
            ADD_FAILURE() << "planned a regime export without winners";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("has no regime winner"), std::string::npos) << e.what();
        }
        fs::remove_all(plain.dir);
    }

    TEST(RegimeExport, WritesEachWinnersBundleAndADispatcherWhoseCTableMatchesThePlan)
    {
        RegimeSession r;
        buildRegimeSession(r);
        const fs::path out = kl::test::freshDir("regime-export");
        ExportOptions o;
        o.outDir = out;
        const RegimeExportResult res = exportRegimes(SessionStore::load(r.built.dir), r.problem, o);
        EXPECT_FALSE(res.forced);
        for (const char* f : { "manifest.json", "CMakeLists.txt", "include/kl_rmsnorm_fx_regimes.h",
                 "include/kl_rmsnorm_fx_regimes_run.h", "src/kl_rmsnorm_fx_regimes.c",
                 "src/kl_rmsnorm_fx_regimes_run.c", "test/regimes_dispatch_test.c", "decode/manifest.json",
                 "decode/include/kl_rmsnorm_fx_decode.h", "decode/src/kl_rmsnorm_fx_decode_dispatch.c",
                 "prefill/src/kl_rmsnorm_fx_prefill_dispatch.c", "prefill/CMakeLists.txt" })
            EXPECT_TRUE(fs::exists(out / f)) << f;
        const Json manifest = Json::parse(kl::test::readTextFile(out / "manifest.json"));
        EXPECT_EQ(manifest.at("kind"), "regime-dispatcher");
        ASSERT_EQ(manifest.at("regimes").size(), 2u);
        EXPECT_EQ(manifest.at("regimes")[0].at("candidate"), r.decodeWinner);
        EXPECT_EQ(manifest.at("regimes")[1].at("condition"), "T > 256");
        EXPECT_EQ(manifest.at("regimes")[1].at("bundle"), "prefill/");
        const Json decodeManifest = Json::parse(kl::test::readTextFile(out / "decode/manifest.json"));
        EXPECT_EQ(decodeManifest.at("candidate").at("id"), r.decodeWinner);

        // The generated C answers what the plan answers, on every shape a winner was measured on and the corners.
        if (std::system("command -v cc > /dev/null 2>&1") != 0)
            GTEST_SKIP() << "no C compiler";
        std::string log;
        const std::string inc = " -Iinclude -Isrc -Idecode/include -Idecode/src -Iprefill/include";
        ASSERT_EQ(runCommand("cd " + out.string() + " && cc -std=c99 -Wall -Wextra -Werror" + inc
                          + " -o rdt test/regimes_dispatch_test.c src/kl_rmsnorm_fx_regimes.c"
                            " decode/src/kl_rmsnorm_fx_decode_dispatch.c prefill/src/kl_rmsnorm_fx_prefill_dispatch.c"
                            " -lm && ./rdt",
                      &log),
            0)
            << log;
        EXPECT_NE(log.find("0 wrong"), std::string::npos) << log;
        const std::string table = kl::test::readTextFile(out / "test/regimes_dispatch_test.c");
        EXPECT_NE(table.find("}, 0, 0}, /* H=4096,T=16 */"), std::string::npos) << table;
        EXPECT_NE(table.find("}, 1, 1}, /* H=4096,T=4096 */"), std::string::npos) << table;
        EXPECT_NE(table.find("}, 0, -1}, /* H=16384,T=256 */"), std::string::npos) << table;
        fs::remove_all(out);
    }

} // namespace
} // namespace kl
