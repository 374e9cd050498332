#include "agent/tuning_db/tuning_database.h"
#include "core/errors.h"
#include "core/session_store.h"
#include "tests/core/loop_test_support.h"

#include <fstream>
#include <gtest/gtest.h>

using namespace kl;
using namespace kl::testonly;

namespace {

MeasurementKey keyFor(std::int64_t block, std::int64_t vec)
{
    SyntheticEvaluatorForTests ev;
    Candidate c;
    c.source = kSyntheticTemplate;
    c.params = cfg(block, vec);
    return measurementKeyFor(c, ev.problem(), ev.device());
}

Evaluation measured(std::int64_t block, std::int64_t vec)
{
    SyntheticEvaluatorForTests ev;
    Candidate c;
    c.id = "c0001";
    c.source = kSyntheticTemplate;
    c.params = cfg(block, vec);
    return ev.evaluate(c, {}, CancelToken());
}

} // namespace

TEST(TuningDatabase, KeyCoversSourceParamsShapesDeviceAndVersions)
{
    SyntheticEvaluatorForTests ev;
    Candidate c;
    c.source = kSyntheticTemplate;
    c.params = cfg(128, 2);
    const std::string base = measurementKeyFor(c, ev.problem(), ev.device()).digest();
    Candidate other = c;
    other.params["VEC"] = 4;
    EXPECT_NE(measurementKeyFor(other, ev.problem(), ev.device()).digest(), base);
    other = c;
    other.source += "\n// changed";
    EXPECT_NE(measurementKeyFor(other, ev.problem(), ev.device()).digest(), base);
    DeviceInfo d = ev.device();
    d.driverVersion = "999.1";
    EXPECT_NE(measurementKeyFor(c, ev.problem(), d).digest(), base);
    d = ev.device();
    d.cudaRuntime = "12.8";
    EXPECT_NE(measurementKeyFor(c, ev.problem(), d).digest(), base);
    Problem p = ev.problem();
    p.tuningShapes[0].dims["T"] = 4096;
    EXPECT_NE(measurementKeyFor(c, p, ev.device()).digest(), base);
    p = ev.problem();
    p.tuningShapes[0].weight = 10; // weights change the objective, not the measurement
    EXPECT_EQ(measurementKeyFor(c, p, ev.device()).digest(), base);
    // A lighter measurement protocol (kloop run --quick) is keyed apart: a full run never reuses it.
    EXPECT_NE(measurementKeyFor(c, ev.problem(), ev.device(), "quick").digest(), base);
    EXPECT_EQ(measurementKeyFor(c, ev.problem(), ev.device(), "").digest(), base);
}

TEST(TuningDatabase, RecordsSurviveReopenAndATornLastLine)
{
    const auto dir = freshDir("tdb");
    const auto file = dir / "sub" / "tuning.jsonl";
    {
        auto db = TuningDatabase::open(file);
        db->record(keyFor(128, 2), measured(128, 2));
        db->record(keyFor(256, 4), measured(256, 4));
        MeasurementKey quick = keyFor(512, 8);
        quick.protocol = "quick";
        db->record(quick, measured(512, 8));
        EXPECT_FALSE(db->find(keyFor(512, 8)));
        EXPECT_TRUE(db->find(keyFor(128, 2)));
        EXPECT_FALSE(db->find(keyFor(64, 1)));
    }
    {
        std::ofstream out(file, std::ios::app);
        out << R"({"v":1,"key":{"problem":"synthetic","sou)"; // killed mid-write
    }
    std::vector<std::string> warnings;
    auto db = TuningDatabase::open(file, &warnings);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("torn last line"), std::string::npos);
    EXPECT_EQ(db->size(), 3u);
    MeasurementKey quickAgain = keyFor(512, 8);
    quickAgain.protocol = "quick";
    EXPECT_TRUE(db->find(quickAgain)); // the protocol survives the file
    const auto e = db->find(keyFor(256, 4));
    ASSERT_TRUE(e);
    EXPECT_NEAR(e->shapes.at(0).timing->medianUs, measured(256, 4).shapes.at(0).timing->medianUs, 1e-9);
    db->record(keyFor(64, 1), measured(64, 1)); // appends cleanly after the torn line
    db.reset();
    EXPECT_EQ(TuningDatabase::open(file)->size(), 4u);
    std::filesystem::remove_all(dir);
}

TEST(TuningDatabase, MalformedLineInTheMiddleIsAnErrorNamingTheLine)
{
    const auto dir = freshDir("tdb-bad");
    std::filesystem::create_directories(dir);
    const auto file = dir / "tuning.jsonl";
    {
        auto db = TuningDatabase::open(file);
        db->record(keyFor(128, 2), measured(128, 2));
    }
    const std::string good = readFile(file);
    writeFileAtomic(file, "{not json}\n" + good);
    try {
        TuningDatabase::open(file);
        FAIL() << "expected InputError";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos);
    }
    std::filesystem::remove_all(dir);
}

TEST(TuningDatabase, KernelTunerCacheRoundTrip)
{
    const auto dir = freshDir("tdb-kt");
    auto db = TuningDatabase::open(dir / "a.jsonl");
    const std::vector<std::pair<int, int>> configs { { 128, 2 }, { 256, 4 }, { 512, 8 }, { 64, 1 } };
    for (auto [b, v] : configs)
        db->record(keyFor(b, v), measured(b, v));
    Evaluation failedCompile;
    failedCompile.verdict = Verdict::CompileFailed;
    db->record(keyFor(32, 1), failedCompile);
    const auto spaces = db->spaces();
    ASSERT_EQ(spaces.size(), 1u);
    EXPECT_EQ(spaces[0].records, 5u);
    const nlohmann::json kt = db->exportKernelTunerCache(spaces[0].shapesDigest, "synthetic_kernel");
    EXPECT_EQ(kt["kernel_name"], "synthetic_kernel");
    EXPECT_EQ(kt["tune_params_keys"], nlohmann::json({ "BLOCK", "ROWS", "UNROLL", "VEC" }));
    EXPECT_EQ(kt["objective"], "time");
    ASSERT_TRUE(kt["cache"].contains("128,2,2,2"));
    EXPECT_EQ(kt["cache"]["32,2,2,1"]["time"], "CompilationFailedConfig");
    const double t = kt["cache"]["128,2,2,2"]["time"].get<double>();
    EXPECT_GT(t, 0);

    // Kernel Tuner writes the header, then appends cache entries as it goes: a killed run leaves a file
    // without the closing braces of "cache" and of the document.
    nlohmann::json header = kt;
    header.erase("cache");
    header.erase("kernelloop");
    std::string text = header.dump(1);
    text.pop_back(); // the closing brace
    text += ",\n\"cache\": {";
    bool firstEntry = true;
    for (const auto& [id, entry] : kt["cache"].items()) {
        text += (firstEntry ? "\n\"" : ",\n\"") + id + "\": " + entry.dump();
        firstEntry = false;
    }
    const nlohmann::json parsed = parseKernelTunerCache(text, "killed.json");
    auto other = TuningDatabase::open(dir / "b.jsonl");
    std::vector<std::string> warnings;
    const std::size_t added = other->importKernelTunerCache(
        parsed, db->recordsOf(spaces[0].shapesDigest)[0].key, "kernel-tuner:x", &warnings);
    EXPECT_EQ(added, 5u) << ::testing::PrintToString(warnings);
    const auto imported = other->lookup(keyFor(128, 2));
    ASSERT_TRUE(imported);
    EXPECT_NEAR(imported->evaluation.shapes.at(0).timing->medianUs, t * 1000.0, 1e-6);
    EXPECT_EQ(other->lookup(keyFor(32, 1))->evaluation.verdict, Verdict::CompileFailed);
    // Imported times have no baseline speedups: the loop measures those configurations itself.
    EXPECT_FALSE(other->find(keyFor(128, 2)));
    EXPECT_EQ(
        other->importKernelTunerCache(parsed, db->recordsOf(spaces[0].shapesDigest)[0].key, "kernel-tuner:x"), 0u);
    EXPECT_THROW(parseKernelTunerCache("{\"cache\": [1, 2", "bad.json"), InputError);
    EXPECT_THROW(other->importKernelTunerCache(nlohmann::json::object(), keyFor(1, 1), "empty.json"), InputError);
    std::filesystem::remove_all(dir);
}

TEST(TuningDatabase, RecordCostPrefersSpeedupAndRejectsFailures)
{
    const Evaluation e = measured(256, 4);
    EXPECT_GT(recordCost(e), 0);
    EXPECT_LT(recordCost(e), 1); // faster than the baseline
    Evaluation bad = e;
    bad.shapes[0].correct = false;
    EXPECT_TRUE(std::isinf(recordCost(bad)));
}

// qa row 228: a Kernel Tuner cache with THREADS=1 (not a declared value) and time "abc" was imported.
TEST(TuningDatabase, KernelTunerEntryWithUndeclaredValuesOrABadTimeIsAnErrorNamingTheEntry)
{
    const auto dir = freshDir("tdb-kt-bad");
    auto db = TuningDatabase::open(dir / "a.jsonl");
    const KernelSpec spec = parseKernelSpec(kSyntheticTemplate);
    auto cache = [](nlohmann::json entries) {
        return nlohmann::json { { "tune_params_keys", { "BLOCK", "VEC" } }, { "cache", std::move(entries) } };
    };
    auto importError = [&](const nlohmann::json& doc) {
        try {
            db->importKernelTunerCache(doc, keyFor(128, 2), "kt.json", nullptr, &spec);
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    const nlohmann::json good = { { "BLOCK", 128 }, { "VEC", 2 }, { "time", 0.5 } };
    std::string why
        = importError(cache({ { "128,2", good }, { "1,2", { { "BLOCK", 1 }, { "VEC", 2 }, { "time", 0.1 } } } }));
    EXPECT_EQ(why.rfind("kt.json.cache[\"1,2\"]: BLOCK=1 is not one of the values declared on line 1", 0), 0u) << why;
    why = importError(
        cache({ { "128,2", good }, { "8,2", { { "BLOCK", 128 }, { "VEC", 2 }, { "WREG", 3 }, { "time", 1 } } } }));
    EXPECT_EQ(why, "") << "only the tune_params_keys are parameters";
    why = importError(cache({ { "256,4", { { "BLOCK", 256 }, { "VEC", 4 }, { "time", "abc" } } } }));
    EXPECT_EQ(
        why.rfind("kt.json.cache[\"256,4\"].time: 'abc' is neither a number of ms nor a Kernel Tuner failure", 0), 0u)
        << why;
    why = importError(nlohmann::json { { "tune_params_keys", { "BLOCK", "THREADS" } },
        { "cache", { { "64,1", { { "BLOCK", 64 }, { "THREADS", 1 }, { "time", 1.0 } } } } } });
    EXPECT_NE(why.find("parameter 'THREADS' is not declared (declared: BLOCK, VEC, UNROLL, ROWS)"), std::string::npos)
        << why;
    // A deeply nested time is refused without being copied (a copy recursed once per level: SIGSEGV).
    const nlohmann::json deep
        = nlohmann::json::parse("{\"tune_params_keys\":[\"BLOCK\"],\"cache\":{\"64\":{\"BLOCK\":64,\"time\":"
            + std::string(200000, '[') + std::string(200000, ']') + "}}}");
    why = importError(deep);
    EXPECT_EQ(why, "kt.json.cache[\"64\"].time: expected a number of ms or a Kernel Tuner failure, got array");
    // A refused file records nothing, not even its good entries.
    ASSERT_EQ(db->spaces().size(), 1u);
    EXPECT_EQ(db->spaces()[0].records, 1u) << "only the one good import above (its two entries are one configuration)";
    EXPECT_EQ(db->importKernelTunerCache(
                  cache({ { "512,8", { { "BLOCK", 512 }, { "VEC", 8 }, { "time", "InvalidConfig" } } } }),
                  keyFor(128, 2), "kt.json", nullptr, &spec),
        1u);
    std::filesystem::remove_all(dir);
}
