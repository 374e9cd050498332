// `kloop profile --sol` as a process, end to end, in CI: the real binary with kl_test_fake_worker (the
// protocol-level test double of kloop-worker, fake_gpu_worker.cpp says how it models the profile op) in place of
// the GPU. Expected times come from the double's own `time` op on the same shape (its timing model), so the
// table, the speedup and the .kltrace are checked against the model and not against numbers copied here.
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/session_store.h"
#include "kernels/worker_client.h"
#include "kernels/worker_protocol.h"
#include "profiler/analysis.h"
#include "profiler/importers.h"
#include "tests/support/kloop_process.h"

#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace fs = std::filesystem;
using namespace kl;
using nlohmann::json;

namespace {

using namespace kl::clitest;

const double kRmsnormBytes = 4.0 * 16384 * 8192 + 2.0 * 8192; // the problem's "4*T*H + 2*H" at T=16384, H=8192

// A row of the printed table: plan, kernel, time us, DRAM %, SM %, occupancy, class.
struct TableRow {
    std::string plan, kernel, dram, sm, occupancy, bound;
    double us = -1;
};

std::vector<TableRow> tableRows(const std::string& out)
{
    std::vector<TableRow> rows;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream f(line);
        TableRow r;
        if (!(f >> r.plan) || (r.plan != "baseline" && r.plan != "candidate"))
            continue;
        if (f >> r.kernel >> r.us >> r.dram >> r.sm >> r.occupancy >> r.bound)
            rows.push_back(r);
    }
    return rows;
}

// The printed "candidate vs baseline: 1.234x" figure, or -1.
double printedSpeedup(const std::string& out)
{
    const std::string key = "candidate vs baseline: ";
    const auto at = out.find(key);
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + key.size()));
}

// Kernel events per timeline row of an imported trace, by row name.
std::map<std::string, std::map<std::string, int>> kernelsByRow(const prof::Trace& t)
{
    std::map<std::string, std::map<std::string, int>> out;
    for (const auto& e : t.events())
        if (e.kind == prof::EventKind::Kernel)
            ++out[std::string(t.strings().view(t.rows()[e.row].name))][std::string(t.name(e))];
    return out;
}

struct KloopProfileSol : ::testing::Test {
    static inline fs::path suiteDir;
    static inline double baselineUs = 0; // the double's time op on T=16384,H=8192
    static inline double templateUs = 0;
    static inline double templateSpeedup = 0;

    // rmsnorm's template with its efficiency under the double pinned below the DRAM ceiling, so the bottleneck
    // text does not hang on the hash of whatever the template's source is today.
    static inline fs::path templatePath;
    fs::path scratch;

    // The oracle: the double's time op for the template with the parameters kloop sends (its defaults).
    static void SetUpTestSuite()
    {
        suiteDir = fs::temp_directory_path() / ("kl_kloop_profile_sol_" + std::to_string(::getpid()));
        fs::remove_all(suiteDir);
        fs::create_directories(suiteDir / "cache");
        const Problem problem = loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm");
        const std::string source
            = "// kl-test-double: efficiency=0.6\n" + readFile(fs::path(problem.folder) / problem.templateFile);
        templatePath = suiteDir / "template.cu";
        std::ofstream(templatePath) << source;
        WorkerClient client { WorkerOptions { { KL_FAKE_WORKER_PATH }, {}, 30, {} } };
        const auto loaded = client.addSetup({ { "op", "load_problem" }, { "problem_json", toJson(problem) },
            { "reference_source", readFile(fs::path(problem.folder) / problem.referenceFile) },
            { "baseline_source", readFile(fs::path(problem.folder) / problem.baselineFile) } });
        ASSERT_TRUE(loaded.ok()) << loaded.error;
        const json candidate = { { "source", source }, { "params", wire::toJson(parseKernelSpec(source).defaults()) } };
        const auto r = client.request(
            { { "op", "time" }, { "problem", problem.name }, { "candidate", candidate },
                { "shapes", json::array({ { { "dims", { { "T", 16384 }, { "H", 8192 } } }, { "weight", 1 } } }) },
                { "baseline", true } },
            60);
        ASSERT_TRUE(r.ok()) << r.error;
        const ShapeResult s = wire::shapeResult(r.body.at("shapes").at(0));
        ASSERT_TRUE(s.timing && s.baselineTiming);
        baselineUs = s.baselineTiming->medianUs;
        templateUs = s.timing->medianUs;
        templateSpeedup = s.speedup;
    }
    static void TearDownTestSuite()
    {
        if (!std::getenv("KL_TEST_KEEP"))
            fs::remove_all(suiteDir);
    }

    void SetUp() override
    {
        scratch = suiteDir / ::testing::UnitTest::GetInstance()->current_test_info()->name();
        fs::create_directories(scratch / "home");
    }

    // Nothing from the user's machine reaches the run; the NVRTC cache is shared by the suite's runs.
    std::map<std::string, std::string> environment() const
    {
        return { { "KL_WORKER", KL_FAKE_WORKER_PATH }, { "HOME", (scratch / "home").string() },
            { "XDG_CACHE_HOME", (suiteDir / "cache").string() }, { "XDG_CONFIG_HOME", (scratch / "config").string() },
            { "KL_CACHE_DIR", (suiteDir / "cache").string() }, { "KL_CONTEXT_DIRS", "" }, { "KL_PROBLEMS_DIR", "" },
            { "KL_DATA_DIR", "" }, { "KL_NO_CUPTI", "" } };
    }

    ProcessResult profile(const fs::path& candidate, const fs::path& trace, std::vector<std::string> extra = {})
    {
        std::vector<std::string> args { "profile", "--sol", "--problem", "rmsnorm", "--candidate", candidate.string(),
            "--shape", "T=16384,H=8192", "--out", trace.string() };
        args.insert(args.end(), extra.begin(), extra.end());
        return runKloop(args, environment(), scratch);
    }

    // The template with test-double markers on top.
    fs::path markedTemplate(const std::string& markers) const
    {
        const fs::path p = scratch / "marked.cu";
        std::ofstream(p) << markers << kl::test::readTextFile(templatePath);
        return p;
    }

    static double dramPct(double us) { return kRmsnormBytes / (us * 1e-6) / 4e12 * 100.0; }
};

TEST_F(KloopProfileSol, TableSpeedupAndTraceFollowTheDoublesTimingModel)
{
    ASSERT_GT(baselineUs, 0);
    ASSERT_GT(templateUs, 0);
    // The baseline's model in closed form (efficiency 0.30), so the oracle itself is pinned.
    EXPECT_NEAR(baselineUs, 0.5 + kRmsnormBytes / (4e12 * 0.30) * 1e6, 1e-6);

    const fs::path trace = scratch / "F.kltrace";
    const ProcessResult r = profile(templatePath, trace);
    ASSERT_EQ(r.exitCode, 0) << r.out << r.err;

    const auto rows = tableRows(r.out);
    ASSERT_EQ(rows.size(), 2u) << r.out;
    EXPECT_EQ(rows[0].plan, "baseline");
    EXPECT_EQ(rows[0].kernel, "rmsnorm_baseline");
    EXPECT_NEAR(rows[0].us, baselineUs, 0.006) << r.out;
    EXPECT_NEAR(std::stod(rows[0].dram), dramPct(baselineUs), 0.051) << r.out;
    EXPECT_EQ(rows[0].sm, "25.0");
    EXPECT_EQ(rows[0].occupancy, "80.0");
    EXPECT_EQ(rows[0].bound, "latency-bound") << "DRAM ~30 %, SM 25 %: neither unit is busy";
    EXPECT_EQ(rows[1].plan, "candidate");
    EXPECT_EQ(rows[1].kernel, "rmsnorm_template");
    EXPECT_NEAR(rows[1].us, templateUs, 0.006) << r.out;
    EXPECT_NEAR(std::stod(rows[1].dram), dramPct(templateUs), 0.051) << r.out;
    EXPECT_EQ(rows[1].bound, "memory-bound") << "the double's efficiencies are >= 0.45, so DRAM >= 40 %";

    EXPECT_NEAR(printedSpeedup(r.out), templateSpeedup, 0.0006) << r.out;
    EXPECT_NE(r.out.find("bottleneck (candidate): memory-bound: memory-bound below the ceiling"), std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("counters unavailable"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("wrote " + fs::absolute(trace).string()), std::string::npos) << r.err;

    // The .kltrace, as the profiler (and the workbench's timeline) imports it.
    ASSERT_TRUE(fs::exists(trace));
    ASSERT_EQ(prof::detectFormat(trace.string()), prof::TraceFormat::KlTrace);
    const prof::Trace t = prof::importTraceFile(trace.string());
    ASSERT_EQ(t.rows().size(), 2u);
    EXPECT_EQ(t.strings().view(t.rows()[0].name), "baseline") << "baseline is the upper row";
    EXPECT_EQ(t.strings().view(t.rows()[1].name), "candidate");
    const auto kernels = kernelsByRow(t);
    EXPECT_EQ(kernels.at("baseline"), (std::map<std::string, int> { { "rmsnorm_baseline", 5 } }));
    EXPECT_EQ(kernels.at("candidate"), (std::map<std::string, int> { { "rmsnorm_template", 5 } }));
    ASSERT_EQ(t.sol().size(), 2u);
    for (const auto& s : t.sol())
        EXPECT_NEAR(s.dramBytes, kRmsnormBytes, 1.0) << s.name;
    const prof::Analysis a = prof::analyze(t);
    ASSERT_EQ(a.kernels.size(), 2u);
    for (const auto& k : a.kernels) {
        EXPECT_EQ(k.count, 5u) << k.name;
        EXPECT_EQ(k.roofline.basis, "sol-counters") << k.name;
        EXPECT_NEAR(k.totalNs / 5.0 / 1e3, k.name == "rmsnorm_baseline" ? baselineUs : templateUs, 0.002) << k.name;
    }
}

TEST_F(KloopProfileSol, JsonHasBothPlansAndTheirRuns)
{
    const fs::path trace = scratch / "F.kltrace";
    const ProcessResult r = profile(templatePath, trace, { "--json", "--launches", "3" });
    ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
    json j;
    ASSERT_NO_THROW(j = json::parse(r.out)) << r.out;
    EXPECT_EQ(j.at("problem"), "rmsnorm");
    EXPECT_EQ(j.at("candidate"), "template");
    EXPECT_EQ(j.at("device"), "test double (no GPU)");
    EXPECT_EQ(j.at("trace_file"), fs::absolute(trace).string());
    EXPECT_NEAR(j.at("speedup").get<double>(), templateSpeedup, 1e-5);
    ASSERT_EQ(j.at("plans").size(), 2u);
    const json& base = j["plans"][0];
    const json& cand = j["plans"][1];
    EXPECT_EQ(base.at("role"), "baseline");
    EXPECT_EQ(base.at("label"), "baseline.cu");
    EXPECT_EQ(cand.at("role"), "candidate");
    EXPECT_NEAR(base.at("gpu_us").get<double>(), baselineUs, 0.001);
    EXPECT_NEAR(cand.at("gpu_us").get<double>(), templateUs, 0.001);
    for (const json* p : { &base, &cand }) {
        EXPECT_TRUE(p->at("counters").get<bool>());
        ASSERT_EQ(p->at("kernels").size(), 1u);
        const json& k = p->at("kernels")[0];
        EXPECT_NEAR(k.at("dram_throughput_pct").get<double>(), dramPct(k.at("duration_us").get<double>()), 0.01);
        EXPECT_NEAR(k.at("dram_bytes").get<double>(), kRmsnormBytes, 1.0);
    }
    EXPECT_EQ(base["kernels"][0].at("name"), "rmsnorm_baseline");
    EXPECT_EQ(cand["kernels"][0].at("name"), "rmsnorm_template");
    EXPECT_EQ(cand.at("bound"), "memory-bound");

    // The worker's report rides along, parseable by the client's own reader: 3 runs of one kernel per plan,
    // monotonic records, the launch line's grid and block.
    const ProfileReport report = wire::profileReport(j.at("report"), "report");
    ASSERT_EQ(report.plans.size(), 2u);
    for (const auto& p : report.plans) {
        EXPECT_EQ(p.launches, 3) << p.role;
        EXPECT_EQ(p.kernelsPerRun, 1) << p.role;
        ASSERT_EQ(p.records.size(), 3u) << p.role;
        EXPECT_EQ(p.eventUs.size(), 3u) << p.role;
        for (std::size_t i = 1; i < p.records.size(); ++i)
            EXPECT_GT(p.records[i].startNs, p.records[i - 1].endNs) << p.role;
    }
    EXPECT_GT(report.plans[1].records[0].startNs, report.plans[0].records.back().endNs);
    EXPECT_EQ(report.plans[0].records[0].grid[0], 16384) << "baseline: grid=(T)";
    EXPECT_EQ(report.plans[0].records[0].block[0], 256);
    // template: block=(THREADS) = 256 by default; an 8192-wide row needs 8192 / (VEC 8 * CACHE 4) = 256 threads, so
    // a CTA holds one row and the grid is T.
    EXPECT_EQ(report.plans[1].records[0].block[0], 256);
    EXPECT_EQ(report.plans[1].records[0].grid[0], 16384);

    const prof::Trace t = prof::importTraceFile(trace.string());
    const auto kernels = kernelsByRow(t);
    EXPECT_EQ(kernels.at("baseline").at("rmsnorm_baseline"), 3);
    EXPECT_EQ(kernels.at("candidate").at("rmsnorm_template"), 3);
}

TEST_F(KloopProfileSol, WithoutCountersItStillExitsZeroAndSaysWhy)
{
    // The efficiency marker also pins the candidate's time, so the speedup is checked in closed form here.
    const fs::path candidate = markedTemplate("// kl-test-double: no-counters\n// kl-test-double: efficiency=0.6\n");
    const fs::path trace = scratch / "F.kltrace";
    const ProcessResult r = profile(candidate, trace);
    ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
    const std::string note = "counters unavailable: the test double models a worker without performance counters";
    EXPECT_NE(r.out.find("baseline: " + note), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("candidate: " + note), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("bottleneck (candidate): unknown: no counters"), std::string::npos) << r.out;
    const auto rows = tableRows(r.out);
    ASSERT_EQ(rows.size(), 2u) << r.out;
    for (const auto& row : rows) {
        EXPECT_EQ(row.dram, "-") << row.plan;
        EXPECT_EQ(row.bound, "unknown") << row.plan;
    }
    const double candidateUs = 0.5 + kRmsnormBytes / (4e12 * 0.6) * 1e6;
    EXPECT_NEAR(rows[1].us, candidateUs, 0.006);
    EXPECT_NEAR(printedSpeedup(r.out), baselineUs / candidateUs, 0.0006) << r.out;

    // The timeline is still written, with the reason as a warning and no counters.
    const prof::Trace t = prof::importTraceFile(trace.string());
    ASSERT_EQ(t.rows().size(), 2u);
    EXPECT_EQ(t.strings().view(t.rows()[0].name), "baseline");
    EXPECT_EQ(t.strings().view(t.rows()[1].name), "candidate");
    EXPECT_TRUE(t.sol().empty());
    std::string warnings;
    for (const auto& w : t.meta().warnings)
        warnings += w + "\n";
    EXPECT_NE(warnings.find("candidate: no speed-of-light counters: the test double models"), std::string::npos)
        << warnings;

    // --no-counters asks the worker for none: the same path, with the worker's own note.
    const ProcessResult off = profile(templatePath, scratch / "G.kltrace", { "--no-counters" });
    ASSERT_EQ(off.exitCode, 0) << off.out << off.err;
    EXPECT_NE(off.out.find("candidate: counters unavailable: not requested"), std::string::npos) << off.out;
    EXPECT_NEAR(printedSpeedup(off.out), templateSpeedup, 0.0006) << off.out;
}

// --shape names the dims one types; a problem's fixed dims (mla_decode's HQ, DK, PS ...) come from problem.json,
// so the shape fits and the double's bytes are the problem's formula with them.
TEST_F(KloopProfileSol, AShapeOfAProblemWithConstantsGetsThemFromTheProblem)
{
    const fs::path mlaTemplate = fs::path(KL_SOURCE_DIR) / "kernels" / "problems" / "mla_decode" / "template.cu";
    const ProcessResult r
        = runKloop({ "profile", "--sol", "--problem", "mla_decode", "--candidate", mlaTemplate.string(), "--shape",
                       "B=2,SQ=1,MAXP=3", "--out", (scratch / "M.kltrace").string(), "--json" },
            environment(), scratch);
    ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j.at("shape").at("dims").at("DK"), 576);
    EXPECT_EQ(j.at("shape").at("dims").at("B"), 2);
    // "2 * B * ((MAXP - 1) * PS + 1) * DK + 2 * B * SQ * HQ * (DK + DV) + 4 * B * MAXP + 4 * B"
    const double bytes = 2.0 * 2 * (2 * 64 + 1) * 576 + 2.0 * 2 * 1 * 128 * (576 + 512) + 4.0 * 2 * 3 + 4.0 * 2;
    for (const json& plan : j.at("plans"))
        EXPECT_NEAR(plan.at("kernels").at(0).at("dram_bytes").get<double>(), bytes, 1.0) << plan.dump();
}

} // namespace
