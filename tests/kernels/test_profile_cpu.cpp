// The profile op's wire forms (strict parsing, round trip) and `kloop profile --sol`'s argument errors and
// its message when no worker can run: all without a GPU, in CI.
#include "core/errors.h"
#include "kernels/plan_profile.h"
#include "kernels/worker_protocol.h"
#include "tests/support/kloop_process.h"
#include "tests/support/temp_dir.h"

#include <filesystem>
#include <gtest/gtest.h>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;

kl::ProfileReport sampleReport()
{
    kl::ProfileReport r;
    r.shape.dims = { { "T", 16384 }, { "H", 8192 } };
    r.compile.ok = true;
    r.compile.compileMs = 12.5;
    r.traceAvailable = true;
    for (const char* role : { "baseline", "candidate" }) {
        kl::PlanProfile p;
        p.role = role;
        p.label = std::string(role) == "baseline" ? "baseline.cu" : "rmsnorm_template grid=(T) block=(256)";
        p.launches = 2;
        p.kernelsPerRun = 1;
        for (int i = 0; i < 2; ++i) {
            kl::KernelRecord k;
            k.name = std::string(role) + "_kernel";
            k.startNs = 1'000'000 + 300'000ull * i;
            k.endNs = k.startNs + 250'000;
            k.grid[0] = 16384;
            k.block[0] = 256;
            k.registers = 32;
            k.staticShared = 1024;
            k.stream = 13;
            k.correlation = 40 + i;
            p.records.push_back(k);
            p.eventUs.push_back(251.5 + i);
        }
        p.solAvailable = std::string(role) == "candidate";
        p.solNote = p.solAvailable ? "" : "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: ERR_NVGPUCTRPERM";
        p.solPasses = p.solAvailable ? 8 : 0;
        if (p.solAvailable)
            p.sol.push_back({ "candidate_kernel", 248'000, 86.5, 21.25, 93.0, 5.4e8 });
        r.plans.push_back(p);
    }
    return r;
}

TEST(ProfileWire, ReportRoundTripsEveryField)
{
    const kl::ProfileReport in = sampleReport();
    const kl::wire::Json j = kl::wire::toJson(in);
    const kl::ProfileReport out = kl::wire::profileReport(kl::wire::Json::parse(j.dump()), "reply");
    EXPECT_EQ(out.shape, in.shape);
    EXPECT_TRUE(out.compile.ok);
    EXPECT_DOUBLE_EQ(out.compile.compileMs, 12.5);
    EXPECT_TRUE(out.traceAvailable);
    ASSERT_EQ(out.plans.size(), 2u);
    const kl::PlanProfile* b = out.plan("baseline");
    const kl::PlanProfile* c = out.plan("candidate");
    ASSERT_TRUE(b && c);
    EXPECT_EQ(b->label, "baseline.cu");
    EXPECT_FALSE(b->solAvailable);
    EXPECT_NE(b->solNote.find("ERR_NVGPUCTRPERM"), std::string::npos);
    ASSERT_EQ(c->records.size(), 2u);
    EXPECT_EQ(c->records[1].startNs, 1'300'000u);
    EXPECT_EQ(c->records[1].endNs, 1'550'000u);
    EXPECT_EQ(c->records[0].grid[0], 16384);
    EXPECT_EQ(c->records[0].block[0], 256);
    EXPECT_EQ(c->records[0].registers, 32);
    EXPECT_EQ(c->records[0].staticShared, 1024);
    EXPECT_EQ(c->records[1].correlation, 41u);
    EXPECT_EQ(c->eventUs, in.plans[1].eventUs);
    EXPECT_EQ(c->kernelsPerRun, 1);
    EXPECT_EQ(c->launches, 2);
    ASSERT_EQ(c->sol.size(), 1u);
    EXPECT_EQ(c->sol[0].name, "candidate_kernel");
    EXPECT_DOUBLE_EQ(c->sol[0].dramThroughputPct, 86.5);
    EXPECT_DOUBLE_EQ(c->sol[0].smThroughputPct, 21.25);
    EXPECT_DOUBLE_EQ(c->sol[0].achievedOccupancyPct, 93.0);
    EXPECT_DOUBLE_EQ(c->sol[0].dramBytes, 5.4e8);
    EXPECT_EQ(c->solPasses, 8);
    EXPECT_EQ(out.plan("reference"), nullptr);
}

TEST(ProfileWire, TheTraceOpsRecordFormIsTheSame)
{
    // The trace op has always sent these keys; the profile op's records must stay readable by the same code.
    const auto j = kl::wire::Json::parse(R"({"name":"k","start_ns":5,"end_ns":9,"grid":[2,1,1],"block":[64,1,1],
        "registers":40,"static_shared":0,"dynamic_shared":128,"stream":7,"correlation":3,"device_launched":false})");
    const kl::KernelRecord k = kl::wire::kernelRecord(j, "records[0]");
    EXPECT_EQ(k.endNs - k.startNs, 4u);
    EXPECT_EQ(k.dynamicShared, 128);
    EXPECT_EQ(kl::wire::toJson(k), j);
}

void expectRejected(const std::string& mutation, kl::wire::Json j, const std::string& needle)
{
    try {
        kl::wire::profileReport(j, "reply");
        ADD_FAILURE() << mutation << ": accepted";
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << mutation << ": " << e.what();
    }
}

TEST(ProfileWire, MalformedRepliesNameTheField)
{
    const kl::wire::Json good = kl::wire::toJson(sampleReport());
    auto j = good;
    j.erase("plans");
    expectRejected("no plans", j, "reply.plans");
    j = good;
    j["plans"][1]["role"] = "reference";
    expectRejected("unknown role", j, "reply.plans[1].role");
    j = good;
    j["plans"][1]["role"] = "baseline";
    expectRejected("two baselines", j, "second baseline");
    j = good;
    j["plans"][0]["records"][1]["end_ns"] = 1;
    expectRejected("end before start", j, "reply.plans[0].records[1].end_ns");
    j = good;
    j["plans"][1]["records"][0]["grid"] = { 1, 2 };
    expectRejected("grid of two", j, "reply.plans[1].records[0].grid");
    j = good;
    j["plans"][1]["kernels_per_run"] = 3;
    expectRejected("more kernels per run than records", j, "reply.plans[1].kernels_per_run");
    j = good;
    j["plans"][0]["sol"]["note"] = "";
    expectRejected("no counters, no reason", j, "reply.plans[0].sol");
    j = good;
    j["plans"][1]["sol"]["kernels"][0]["dram_throughput_pct"] = "high";
    expectRejected("a string for a number", j, "dram_throughput_pct");
    j = good;
    j["plans"][0]["event_us"] = { 1.0, "x" };
    expectRejected("event time not a number", j, "reply.plans[0].event_us[1]");
    expectRejected("not an object", kl::wire::Json::array(), "reply");
}

// ---- kloop profile --sol: argument errors and the no-worker message (the kloop binary itself)
#ifdef KLOOP_PATH

struct CliRun {
    int code = -1;
    std::string output; // stderr, then stdout
};

// `args` split at spaces; `env` one NAME=VALUE or "".
CliRun kloop(const std::string& args, const std::string& env = {})
{
    std::istringstream words(args);
    const std::vector<std::string> argv { std::istream_iterator<std::string>(words), {} };
    std::map<std::string, std::string> vars;
    if (const auto eq = env.find('='); eq != std::string::npos)
        vars[env.substr(0, eq)] = env.substr(eq + 1);
    const kl::test::TempDir scratch;
    const kl::clitest::ProcessResult r = kl::clitest::runKloop(argv, vars, scratch.path());
    return { r.exitCode, r.err + r.out };
}

const std::string kTemplate = std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm/template.cu";

TEST(ProfileSolCli, ArgumentErrorsAreUsageErrors)
{
    struct Case {
        std::string args;
        std::string needle;
    };
    const Case cases[] = {
        { "profile --sol --problem rmsnorm", "exactly one of --candidate" },
        { "profile --sol --problem rmsnorm --candidate " + kTemplate + " --session /tmp/x", "exactly one of" },
        { "profile --sol --candidate " + kTemplate, "--problem is required" },
        { "profile --sol --problem rmsnorm --candidate " + kTemplate + " --node c0001", "--node selects" },
        { "profile --sol --problem rmsnorm --session /tmp/x --params BLOCK=256", "--params goes with --candidate" },
        { "profile --sol --problem rmsnorm --candidate " + kTemplate + " --shape T=16,H", "NAME=VALUE" },
        { "profile --sol --problem rmsnorm --candidate " + kTemplate + " --shape T=sixteen", "not an integer" },
        { "profile --sol --problem rmsnorm --candidate " + kTemplate + " --params BLOCK=2x", "not an integer" },
        { "profile --sol --problem rmsnorm --candidate " + kTemplate + " --launches 0", "--launches" },
        { "profile --sol --problem rmsnorm --candidate " + kTemplate + " -- ./a.out", "no '-- <command>'" },
        { "profile sol --problem rmsnorm stray", "unexpected argument" },
    };
    for (const auto& c : cases) {
        const CliRun r = kloop(c.args);
        EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
        EXPECT_NE(r.output.find(c.needle), std::string::npos) << c.args << "\n" << r.output;
        EXPECT_NE(r.output.find("usage: kloop profile --sol"), std::string::npos) << c.args;
    }
}

TEST(ProfileSolCli, BadInputFailsBeforeAnyGpuWork)
{
    // A worker that cannot exist: these must fail on the input, never reach the worker.
    const std::string noWorker = "KL_WORKER=/nonexistent/kloop-worker";
    CliRun r = kloop("profile --sol --problem rmsnorm --candidate " + kTemplate + " --shape T=16,H=1028", noWorker);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("H=1028 is not a multiple of 8"), std::string::npos) << r.output;
    r = kloop("profile --sol --problem rmsnorm --candidate " + kTemplate + " --shape T=16,H=1024,Q=2", noWorker);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("unknown dim Q"), std::string::npos) << r.output;
    r = kloop("profile --sol --problem no-such-problem --candidate " + kTemplate, noWorker);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("no-such-problem"), std::string::npos) << r.output;
    r = kloop("profile --sol --session /nonexistent/session", noWorker);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("/nonexistent/session"), std::string::npos) << r.output;
}

TEST(ProfileSolCli, NoWorkerSaysSoAndWritesNothing)
{
    const fs::path trace
        = fs::temp_directory_path() / ("kl-profile-noworker-" + std::to_string(::getpid()) + ".kltrace");
    fs::remove(trace);
    const CliRun r = kloop(
        "profile --sol --problem rmsnorm --candidate " + kTemplate + " --shape T=16,H=1024 --out " + trace.string(),
        "KL_WORKER=/nonexistent/kloop-worker");
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("no usable CUDA GPU"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(trace));
}

TEST(ProfileSolCli, SessionCandidatesAreFoundBeforeTheWorkerIsAsked)
{
    const std::string session = std::string(KL_SOURCE_DIR) + "/resources/demo-session";
    const std::string noWorker = "KL_WORKER=/nonexistent/kloop-worker";
    CliRun r = kloop("profile --sol --session " + session + " --node c9999 --shape T=16,H=1024", noWorker);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("has no candidate 'c9999'"), std::string::npos) << r.output;
    // A real node (and the default: the best correct one) gets as far as the worker, and the session's problem is
    // found without --problem.
    for (const std::string node : { " --node c0002", "" }) {
        r = kloop("profile --sol --session " + session + node + " --shape T=16,H=1024", noWorker);
        EXPECT_EQ(r.code, 1) << r.output;
        EXPECT_NE(r.output.find("no usable CUDA GPU"), std::string::npos) << node << "\n" << r.output;
    }
}

TEST(ProfileSolCli, PlainProfileStillWantsACommand)
{
    const CliRun r = kloop("profile");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("-- <command>"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--sol"), std::string::npos) << r.output;
}

#endif

} // namespace
